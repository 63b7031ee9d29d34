"""Bootstrap intervals of the TOFU and MUSE metrics, computed from their per-item values.

Each metric is read as a :class:`~evaldag.engine.uncertainty.Sample`: its items' values
(``value_by_index``), cut into the strata that are resampled on their own, and the rule that
turns them into ``agg_value``. The ``kind`` says which rule:

* ``mean:<field>`` -- probabilities, ROUGE, extraction strength, exact memorization: the mean
  of the field over items (an item's options averaged first; None items left out, as
  ``agg_value`` leaves them out);
* ``truth_ratio:<aggregator>`` -- the per-item truth ratios and the aggregator of its node;
* ``auc`` -- an MIA: forget and holdout scores, two strata, the AUC;
* ``ks`` -- forget quality: the model's and the retain model's truth ratios on the same
  forget items (paired by item key, one stratum); the interval is on the KS statistic and the
  p-value interval is derived from its ends (the p-value falls as the statistic grows), since
  percentiles of a p-value near 1e-20 say nothing;
* ``privleak`` -- Min-K% scores of the model and the retain model, forget and holdout
  strata, each item paired with the retain model's same item;
* ``hmean`` -- model utility: the nine parts on three splits (retain, ra, wf), each split one
  stratum whose items carry all three of its parts, the harmonic mean of the nine means.

The node :func:`interval_node` reads the same parents as the metric it brackets, so asking
for intervals on a warm cache costs no model call.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ...engine import Params, Result, metric
from ...engine.uncertainty import Sample, interval
from .blocks import mean_over_options
from .mia import auc
from .privleak import privleak
from .truth_ratio import TRUTH_RATIO_AGGREGATORS


def _block(x: Any) -> dict[str, Any]:
    return x.to_dict() if isinstance(x, Result) else dict(x or {})


def _sorted_keys(keys: Any) -> list[str]:
    return sorted(keys, key=lambda k: (0, int(k), "") if str(k).lstrip("-").isdigit() else (1, 0, str(k)))


def _items(block: Mapping[str, Any], field: str, what: str) -> tuple[tuple[str, ...], np.ndarray]:
    """The items' ``field`` (options averaged) in row order; None items left out."""
    vbi = block.get("value_by_index")
    if not isinstance(vbi, Mapping) or not vbi:
        raise ValueError(f"{what}: no per-item values (value_by_index)")
    keys, vals = [], []
    for k in _sorted_keys(vbi):
        v = vbi[k]
        if not isinstance(v, Mapping) or field not in v:
            raise ValueError(f"{what}: value_by_index[{k!r}] has no {field!r}")
        if v[field] is None:
            continue
        keys.append(str(k))
        vals.append(mean_over_options(v[field]))
    return tuple(keys), np.asarray(vals, dtype=np.float64)


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x)) if len(x) else float("nan")


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample KS statistic between the model's and the retain model's truth ratios."""
    a, b = np.sort(a), np.sort(b)
    both = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, both, side="right") / len(a)
    cdf_b = np.searchsorted(b, both, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def ks_p_value(d: float, n1: int, n2: int) -> float:
    """``ks_2samp``'s two-sided p-value (its default ``method="auto"``) for statistic ``d``."""
    from scipy.stats import distributions
    from scipy.stats._stats_py import _attempt_exact_2kssamp  # ks_2samp's own exact computation

    if not math.isfinite(d):
        return float("nan")
    if max(n1, n2) <= 10000:
        ok, _, p = _attempt_exact_2kssamp(n1, n2, math.gcd(n1, n2), d, "two-sided")
        if ok:
            return float(min(1.0, max(0.0, p)))
    en = n1 * n2 / (n1 + n2)
    return float(min(1.0, max(0.0, distributions.kstwo.sf(d, np.round(en)))))


def _paired(model: Mapping[str, Any], retain: Mapping[str, Any], field: str, what: str) -> tuple[tuple[str, ...], np.ndarray] | None:
    """Both models' values as two columns when they scored the same items, else None."""
    km, vm = _items(model, field, f"{what} (model)")
    kr, vr = _items(retain, field, f"{what} (retain model)")
    if km != kr:
        return None
    return km, np.stack([vm, vr], axis=1)


def _side(block: Mapping[str, Any], side: str, what: str) -> Mapping[str, Any]:
    b = block.get(side)
    if not isinstance(b, Mapping):
        raise ValueError(f"{what}: no {side!r} side (an MIA block has forget and holdout)")
    return b


# ------------------------------------------------------------------ one builder per kind


def sample_of(kind: str, parents: Mapping[str, Any], ref_value: float = 0.5) -> Sample:
    """The metric of ``kind`` as a :class:`Sample` of its parents' items (Results or EVAL blocks)."""
    blocks = {k: _block(v) for k, v in parents.items()}
    if kind.startswith("mean:"):
        field = kind.split(":", 1)[1]
        keys, vals = _items(blocks["metric"], field, field)
        return Sample(("items",), (keys,), (vals,), _mean)
    if kind.startswith("truth_ratio:"):
        rule = TRUTH_RATIO_AGGREGATORS[kind.split(":", 1)[1]]
        keys, vals = _items(blocks["metric"], "score", "truth ratio")
        return Sample(("items",), (keys,), (vals,), lambda x: float(rule(x)) if len(x) else float("nan"))
    if kind == "auc":
        m = blocks["metric"]
        kf, vf = _items(_side(m, "forget", "MIA"), "score", "MIA forget")
        kh, vh = _items(_side(m, "holdout", "MIA"), "score", "MIA holdout")
        return Sample(("forget", "holdout"), (kf, kh), (vf, vh), lambda f, h: auc(f, h))
    if kind == "ks":
        if "retain" not in blocks or not blocks["retain"].get("value_by_index"):
            raise ValueError("forget quality: no retain-model truth ratios (--retain-logs or --retain-model)")
        both = _paired(blocks["forget"], blocks["retain"], "score", "forget quality")
        if both is not None:  # the same forget items: each resample draws an item for both models
            n = len(both[0])
            return Sample(("forget",), (both[0],), (both[1],), lambda x: _ks(x[:, 0], x[:, 1]), {"statistic": "ks", "n": (n, n)})
        (km, vm), (kr, vr) = _items(blocks["forget"], "score", "model"), _items(blocks["retain"], "score", "retain model")
        return Sample(("model", "retain"), (km, kr), (vm, vr), _ks, {"statistic": "ks", "n": (len(km), len(kr))})
    if kind == "privleak":
        return _privleak(blocks, ref_value)
    if kind == "hmean":
        return _utility(blocks)
    raise ValueError(f"no interval rule {kind!r}")


def _privleak(blocks: Mapping[str, Any], ref_value: float) -> Sample:
    """Forget and holdout strata; the retain model's items paired with the model's when both
    scored the same items, else resampled as strata of their own."""
    model, retain = blocks["forget"], blocks.get("retain")
    sides = ("forget", "holdout")
    has_retain = bool(retain) and all(isinstance(retain.get(s), Mapping) for s in sides)
    both = [_paired(_side(model, s, "privleak"), retain[s], "score", f"privleak {s}") for s in sides] if has_retain else [None, None]
    if all(b is not None for b in both):
        def stat(f: np.ndarray, h: np.ndarray) -> float:
            return float(privleak(auc(f[:, 0], h[:, 0]), auc(f[:, 1], h[:, 1]), ref_value)["agg_value"])
        return Sample(sides, tuple(b[0] for b in both), tuple(b[1] for b in both), stat)
    names, keys, vals = [], [], []
    for who, block in (("", model), ("retain ", retain if has_retain else None)):
        for s in sides if block is not None else ():
            k, v = _items(_side(block, s, "privleak"), "score", f"privleak {who}{s}")
            names.append(who + s), keys.append(k), vals.append(v)

    def stat_apart(f: np.ndarray, h: np.ndarray, *retain_sides: np.ndarray) -> float:
        r = auc(*retain_sides) if retain_sides else None
        return float(privleak(auc(f, h), r, ref_value)["agg_value"])
    return Sample(tuple(names), tuple(keys), tuple(vals), stat_apart)


#: model utility's parts by split, each split's columns in this order: probability, ROUGE, truth ratio
UTILITY_SPLITS = {
    "retain": (("retain_Q_A_Prob", "prob"), ("retain_Q_A_ROUGE", "rougeL_recall"), ("retain_Truth_Ratio", "score")),
    "ra": (("ra_Q_A_Prob_normalised", "prob"), ("ra_Q_A_ROUGE", "rougeL_recall"), ("ra_Truth_Ratio", "score")),
    "wf": (("wf_Q_A_Prob_normalised", "prob"), ("wf_Q_A_ROUGE", "rougeL_recall"), ("wf_Truth_Ratio", "score")),
}


def _utility(blocks: Mapping[str, Any]) -> Sample:
    from scipy.stats import hmean

    keys, vals = [], []
    for split, parts in UTILITY_SPLITS.items():
        cols = [dict(zip(*_items(blocks[name], field, name))) for name, field in parts]
        common = tuple(k for k in cols[0] if all(k in c for c in cols[1:]))
        keys.append(common)
        vals.append(np.asarray([[c[k] for c in cols] for k in common], dtype=np.float64).reshape(len(common), 3))
    true_better = TRUTH_RATIO_AGGREGATORS["true_better"]

    def stat(*splits: np.ndarray) -> float:
        nine = []
        for x in splits:
            nine += [_mean(x[:, 0]), _mean(x[:, 1]), float(true_better(x[:, 2]))]
        if any(not math.isfinite(v) for v in nine):
            return float("nan")
        return 0.0 if min(nine) == 0.0 else float(hmean(nine))

    return Sample(tuple(UTILITY_SPLITS), tuple(keys), tuple(vals), stat)


# ------------------------------------------------------------------ the node


def bracket(sample: Sample, n_resamples: int, seed: int, level: float) -> dict[str, Any]:
    """:func:`~evaldag.engine.uncertainty.interval`, and for the KS statistic its p-values."""
    iv = interval(sample, n_resamples, seed, level)
    if sample.notes.get("statistic") != "ks":
        return iv
    n1, n2 = sample.notes["n"]
    p = lambda d: ks_p_value(d, n1, n2)  # noqa: E731 - the p-value falls as the statistic grows
    out = {**iv, "statistic": "ks", "ks": iv["value"], "ks_percentile": iv["percentile"], "ks_BCa": iv["BCa"], "ks_se": iv["se"]}
    out["value"] = p(iv["value"]) if iv["value"] is not None else None
    for m in ("percentile", "BCa"):
        out[m] = [p(iv[m][1]), p(iv[m][0])] if iv[m] is not None else None
    out["se"] = None  # a standard error of a p-value says nothing; ks_se is the statistic's
    sizes = by_forget_size(sample, n_resamples, seed)
    if sizes:
        out["by_forget_size"] = sizes
    return out


#: TOFU's forget splits, in items: forget01, forget05, forget10
FORGET_SIZES = (40, 200, 400)


def by_forget_size(sample: Sample, subsets: int, seed: int, sizes: tuple[int, ...] = FORGET_SIZES) -> dict[str, Any]:
    """Forget quality recomputed on ``subsets`` seeded random subsets (without replacement) of
    each smaller forget-split size: how much of a p-value is the split's size (1e-2 at 40 items,
    1e-20 at 400 for the same models). Size -> the median p-value and its 2.5 and 97.5 percentiles."""
    rng = np.random.default_rng(seed)
    n1, n2 = sample.notes["n"]
    out: dict[str, Any] = {}
    for size in sizes:
        if size >= min(n1, n2):
            continue
        ps = []
        for _ in range(subsets):
            if len(sample.values) == 1:  # paired: the same items for both models
                x = sample.values[0][rng.choice(n1, size, replace=False)]
                d = _ks(x[:, 0], x[:, 1])
            else:
                d = _ks(sample.values[0][rng.choice(n1, size, replace=False)], sample.values[1][rng.choice(n2, size, replace=False)])
            ps.append(ks_p_value(d, size, size))
        lo, med, hi = np.percentile(ps, [2.5, 50, 97.5])
        out[str(size)] = {"median": float(med), "range": [float(lo), float(hi)], "subsets": subsets}
    return out


class IntervalParams(Params):
    kind: str  # which rule turns the items into the metric (see the module docstring)
    n_resamples: int = 1000
    seed: int = 0
    confidence_level: float = 0.95
    ref_value: float = 0.5  # privleak without a retain model (its own param)


@metric("bootstrap_interval", version="1", params=IntervalParams)
def interval_node(params: IntervalParams, **parents: Result) -> Result:
    """The bracketed metric's value, its percentile and BCa intervals and bootstrap standard error.

    ``agg_value`` is the metric's value recomputed from the items (the same number as its
    own node's); the rest sits beside it, never inside the metric's own block.
    """
    try:
        sample = sample_of(params.kind, parents, params.ref_value)
    except ValueError as e:
        return Result(agg_value=None, reason=f"no interval: {e}")
    out = bracket(sample, params.n_resamples, params.seed, params.confidence_level)
    value, reason = out.pop("value"), out.pop("reason", None)
    return Result(agg_value=value, extra=out, reason=reason)


def interval_kind_for(name: str, rouge_field: str) -> str | None:
    """The rule bracketing the TOFU/MUSE metric ``name`` (None: no item-based interval)."""
    if name == "forget_truth_ratio":
        return "truth_ratio:closer_to_1_better"
    if name.endswith("Truth_Ratio"):
        return "truth_ratio:true_better"
    if name.endswith("_Prob") or name.endswith("_Prob_normalised"):
        return "mean:prob"
    if name.endswith("_ROUGE"):
        return f"mean:{rouge_field}"
    if name in ("extraction_strength", "exact_memorization"):
        return "mean:score"
    if name.startswith("mia_"):
        return "auc"
    return {"forget_quality": "ks", "privleak": "privleak", "model_utility": "hmean"}.get(name)

