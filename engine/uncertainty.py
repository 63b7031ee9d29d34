"""Uncertainty over items: seeded bootstrap intervals and paired comparisons of two runs.

Why: a benchmark split has 40-400 items, and many differences reported between two
checkpoints are inside the resampling noise of those items. A metric is handed here as a
:class:`Sample` -- its per-item values, cut into strata (a forget and a holdout side; the
three splits of model utility) and the statistic that turns them into the headline number
-- and this module knows nothing else of metrics.

* :func:`interval`: ``scipy.stats.bootstrap`` run on the items' positions, every stratum
  resampled on its own, so the resamples are exactly scipy's for the same seed and the
  interval is scipy's percentile interval; BCa from the same resamples (scipy's
  ``bootstrap_result`` with no new resamples), or None with the reason where it is not
  defined (a degenerate bootstrap distribution).
* :func:`paired`: two runs on the same items (matched by item key): the bootstrap interval
  of the difference B - A on shared resamples, and a paired permutation test that swaps
  A's and B's value item by item (for a mean, the sign-flip test on the per-item
  differences): exact over all ``2**n`` swaps when ``n <= EXACT_MAX`` items, seeded
  Monte Carlo otherwise.
* :func:`cluster_interval`: a pool of runs of one method (training seeds) on the same items:
  seeds and items drawn independently (a crossed bootstrap), the mean over the drawn seeds of
  the metric on the drawn items, so seed-to-seed variance is inside the interval;
  :func:`pooled_paired`: two such pools (two methods) on the same items, B - A.
* :func:`paired_series`: :func:`paired` along a series of runs (a sweep's checkpoints, a model
  before and after each attack), each against the previous or the first, Holm and
  Benjamini-Hochberg over the family (:func:`adjust`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Callable, Mapping, Sequence

import numpy as np

#: up to this many items the permutation test enumerates every swap (2**14 = 16384)
EXACT_MAX = 14


@dataclass(frozen=True)
class Sample:
    """A metric as a statistic of resampleable items.

    ``values[s]`` holds one row per item of stratum ``s`` (shape ``(n,)`` or ``(n, k)``),
    ``keys[s]`` the items' keys (what pairs two runs' items), ``stat(*subsets)`` the
    metric's value from one subset (rows) per stratum.
    """

    names: tuple[str, ...]
    keys: tuple[tuple[str, ...], ...]
    values: tuple[np.ndarray, ...]
    stat: Callable[..., float]
    notes: dict[str, Any] = field(default_factory=dict)

    def value(self) -> float:
        return float(self.stat(*self.values))

    def sizes(self) -> dict[str, int]:
        return {n: len(k) for n, k in zip(self.names, self.keys)}


def _finite(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _pair(lo: Any, hi: Any) -> list[float | None] | None:
    lo, hi = _finite(lo), _finite(hi)
    return None if lo is None or hi is None else [lo, hi]


def _bootstrap(statistic: Callable[..., float], sizes: list[int], n_resamples: int, seed: int, level: float) -> tuple[Any, Any, str | None]:
    """scipy's percentile result and its BCa interval on the same resamples (or the reason it has none)."""
    from scipy.stats import bootstrap  # imported here: scipy.stats costs ~0.5 s at start-up

    data = tuple(np.arange(n) for n in sizes)
    kw = dict(vectorized=False, confidence_level=level)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap(data, statistic, n_resamples=n_resamples, method="percentile", rng=np.random.default_rng(seed), **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            bca = bootstrap(data, statistic, n_resamples=0, bootstrap_result=res, method="BCa", rng=np.random.default_rng(seed), **kw)
            bca_ci, why = bca.confidence_interval, None
        except (ValueError, FloatingPointError) as e:
            bca_ci, why = None, f"BCa undefined: {e}"
    if bca_ci is not None and _pair(*bca_ci) is None:
        msg = next((str(w.message) for w in caught), "")
        why = "BCa undefined: " + (msg.split(".")[0] if msg else "the bootstrap distribution is degenerate")
        bca_ci = None
    return res, bca_ci, why


def interval(sample: Sample, n_resamples: int, seed: int, level: float = 0.95) -> dict[str, Any]:
    """The point value, the percentile and BCa intervals and the bootstrap standard error.

    Every stratum needs two items or more (scipy's rule); otherwise the intervals are None
    with a reason.
    """
    out: dict[str, Any] = {"value": _finite(sample.value()), "confidence_level": level, "n_resamples": n_resamples,
                           "seed": seed, "n_items": sample.sizes()}
    small = [n for n, k in zip(sample.names, sample.keys) if len(k) < 2]
    if small:
        return {**out, "percentile": None, "BCa": None, "se": None,
                "reason": f"no interval: {', '.join(small)} {'has' if len(small) == 1 else 'have'} fewer than 2 items"}

    def statistic(*idx: np.ndarray) -> float:
        return sample.stat(*(v[i] for v, i in zip(sample.values, idx)))

    res, bca, why = _bootstrap(statistic, [len(k) for k in sample.keys], n_resamples, seed, level)
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    out.update(percentile=_pair(*res.confidence_interval), BCa=_pair(*bca) if bca is not None else None,
               se=_finite(np.std(dist, ddof=1)) if np.all(np.isfinite(dist)) else None)
    if out["percentile"] is None:
        out["reason"] = "no interval: a resampled value is not a number (an item's value is NaN?)"
    elif out["BCa"] is None and np.ptp(dist) == 0:
        out["reason"] = "BCa undefined: every resample gives the same value (a degenerate bootstrap distribution)"
    elif why:
        out["reason"] = why
    return out


# ------------------------------------------------------------------ paired comparisons


def align(a: Sample, b: Sample) -> tuple[Sample, Sample, dict[str, int]]:
    """Both samples cut to the items they share (by key, per stratum); how many each lost."""
    if a.names != b.names:
        raise ValueError(f"strata differ: {a.names} vs {b.names}")
    ka, va, kb, vb, dropped = [], [], [], [], {}
    for name, keys_a, vals_a, keys_b, vals_b in zip(a.names, a.keys, a.values, b.keys, b.values):
        where_b = {k: i for i, k in enumerate(keys_b)}
        common = [k for k in keys_a if k in where_b]
        ia = [i for i, k in enumerate(keys_a) if k in where_b]
        ib = [where_b[k] for k in common]
        ka.append(tuple(common)), kb.append(tuple(common))
        va.append(vals_a[ia]), vb.append(vals_b[ib])
        lost = len(keys_a) + len(keys_b) - 2 * len(common)
        if lost:
            dropped[name] = lost
    return (Sample(a.names, tuple(ka), tuple(va), a.stat, a.notes), Sample(b.names, tuple(kb), tuple(vb), b.stat, b.notes), dropped)


def _common(samples: Sequence[Sample]) -> tuple[list[Sample], dict[str, int]]:
    """Every sample cut to the items all of them scored (by key, per stratum, in the first's
    order); per stratum, how many items some sample lost."""
    names = samples[0].names
    if any(s.names != names for s in samples):
        raise ValueError(f"strata differ: {sorted({s.names for s in samples})}")
    keep = [set.intersection(*(set(s.keys[i]) for s in samples)) for i in range(len(names))]
    out = []
    for s in samples:
        keys, vals = [], []
        for i, (k, v) in enumerate(zip(s.keys, s.values)):
            where = {key: j for j, key in enumerate(k)}
            order = [key for key in samples[0].keys[i] if key in keep[i]]
            keys.append(tuple(order)), vals.append(v[[where[key] for key in order]])
        out.append(Sample(s.names, tuple(keys), tuple(vals), s.stat, s.notes))
    lost = {n: sum(len(s.keys[i]) for s in samples) - len(samples) * len(keep[i]) for i, n in enumerate(names)}
    return out, {n: k for n, k in lost.items() if k}


def _pooled(pools: list[list[Sample]], labels: list[str], signs: list[float]) -> Sample:
    """A Sample whose strata are each pool's seed positions (a pool of one run has none: it is
    not resampled) and then the shared strata of items; its value is the signed sum over pools
    of the mean over drawn seeds of the metric on the drawn items."""
    first = pools[0][0]
    seeded = [i for i, p in enumerate(pools) if len(p) > 1]

    def one(run: Sample, rows: tuple[np.ndarray, ...]) -> float:
        return run.stat(*(v[r] for v, r in zip(run.values, rows)))

    def stat(*vals: np.ndarray) -> float:
        drawn = dict(zip(seeded, vals[:len(seeded)]))
        rows = vals[len(seeded):]
        return float(sum(sg * np.mean([one(p[int(s)], rows) for s in drawn.get(i, [0])]) for i, (p, sg) in enumerate(zip(pools, signs))))

    names = tuple(labels[i] for i in seeded) + first.names
    keys = tuple(tuple(str(j) for j in range(len(pools[i]))) for i in seeded) + first.keys
    values = tuple(np.arange(len(pools[i])) for i in seeded) + tuple(np.arange(len(k)) for k in first.keys)
    return Sample(names, keys, values, stat)


def _seed_spread(runs: list[Sample]) -> tuple[list[float | None], float | None]:
    each = [_finite(r.value()) for r in runs]
    ok = [v for v in each if v is not None]
    return each, (float(np.std(ok, ddof=1)) if len(ok) > 1 else None)


def cluster_interval(samples: Sequence[Sample], n_resamples: int, seed: int, level: float = 0.95) -> dict[str, Any]:
    """The interval of a metric over a pool of runs (one per training seed) on the same items.

    Seeds and each stratum's items are resampled independently (``scipy.stats.bootstrap``'s
    multi-sample resampling, seed positions as the first sample): a resample's value is the
    mean over its drawn seeds of the metric on its drawn items. The point value is the mean
    of the seeds' values; ``per_seed`` and ``between_seeds_sd`` say how far apart the seeds
    are. One seed: the item interval of :func:`interval`.
    """
    if not samples:
        raise ValueError("no runs to pool")
    runs, dropped = _common(list(samples))
    out = interval(runs[0] if len(runs) == 1 else _pooled([runs], ["seeds"], [1.0]), n_resamples, seed, level)
    out["n_items"] = {"seeds": len(runs), **{k: v for k, v in out["n_items"].items() if k != "seeds"}}
    out["value"] = _finite(np.mean([r.value() for r in runs]))
    out["per_seed"], out["between_seeds_sd"] = _seed_spread(runs)
    if dropped:
        out["unpaired_items"] = dropped
    return out


def pooled_paired(a: Sequence[Sample], b: Sequence[Sample], n_resamples: int, seed: int, level: float = 0.95) -> dict[str, Any]:
    """Two methods, each a pool of runs (training seeds) on the same items: B's mean over its
    seeds minus A's, its interval with A's seeds, B's seeds and the items drawn independently
    (items shared, so paired by item), and each pool's own :func:`cluster_interval`
    (``a_interval``, ``b_interval``). No permutation test (the seeds are not paired); the
    verdict is the interval's."""
    if not a or not b:
        raise ValueError("an empty pool")
    runs, dropped = _common([*a, *b])
    ra, rb = runs[:len(a)], runs[len(a):]
    iv = interval(_pooled([ra, rb], ["seeds A", "seeds B"], [-1.0, 1.0]), n_resamples, seed, level)
    va, vb = _finite(np.mean([r.value() for r in ra])), _finite(np.mean([r.value() for r in rb]))
    (pa, sa), (pb, sb) = _seed_spread(ra), _seed_spread(rb)
    out = {"a": va, "b": vb, "delta": _finite(vb - va) if va is not None and vb is not None else None,
           "percentile": iv["percentile"], "BCa": iv["BCa"], "se": iv["se"], "mde": minimum_detectable(iv["se"], level),
           "p_value": None, "exact": False, "permutations": 0, "interval_only": True,
           "n_items": {"seeds A": len(ra), "seeds B": len(rb), **{k: v for k, v in iv["n_items"].items() if not k.startswith("seeds")}},
           "per_seed": {"a": pa, "b": pb}, "between_seeds_sd": {"a": sa, "b": sb},
           "a_interval": cluster_interval(ra, n_resamples, seed, level)["percentile"],
           "b_interval": cluster_interval(rb, n_resamples, seed, level)["percentile"],
           "confidence_level": level, "n_resamples": n_resamples, "seed": seed}
    if dropped:
        out["unpaired_items"] = dropped
    out["verdict"] = verdict(out, level)
    return out


def _swapped(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...], masks: list[np.ndarray]) -> tuple[list, list]:
    """A and B with the items under ``masks`` exchanged."""
    a2, b2 = [], []
    for x, y, m in zip(a, b, masks):
        mm = m.reshape((-1,) + (1,) * (x.ndim - 1))
        a2.append(np.where(mm, y, x))
        b2.append(np.where(mm, x, y))
    return a2, b2


def permutation_p(a: Sample, b: Sample, n_permutations: int, seed: int) -> tuple[float | None, bool, int]:
    """Two-sided p-value of B - A under "A and B are exchangeable item by item".

    Returns (p, exact, permutations). Exact: the share of all ``2**n`` swaps whose
    ``|difference|`` reaches the observed one (the identity included). Otherwise
    ``(1 + hits) / (1 + n_permutations)`` over seeded random swaps.
    """
    observed = abs(b.stat(*b.values) - a.stat(*a.values))
    if not math.isfinite(observed):
        return None, False, 0
    sizes = [len(k) for k in a.keys]
    n = sum(sizes)
    tol = 1e-12 * max(1.0, observed)

    def diff(flips: np.ndarray) -> float:
        masks, at = [], 0
        for s in sizes:
            masks.append(flips[at:at + s])
            at += s
        x, y = _swapped(a.values, b.values, masks)
        return abs(b.stat(*y) - a.stat(*x))

    if n <= EXACT_MAX:
        total = 1 << n
        hits = sum(diff(np.array([(m >> i) & 1 for i in range(n)], dtype=bool)) >= observed - tol for m in range(total))
        return hits / total, True, total
    rng = np.random.default_rng(seed)
    hits = sum(diff(rng.integers(0, 2, n).astype(bool)) >= observed - tol for _ in range(n_permutations))
    return (1 + hits) / (1 + n_permutations), False, n_permutations


def paired(a: Sample, b: Sample, n_resamples: int, seed: int, level: float = 0.95) -> dict[str, Any]:
    """B - A on the items both runs scored: the difference, its paired bootstrap interval
    (each resample draws the same items for A and B), the permutation p-value and a verdict.

    ``inside the noise`` when the interval holds 0 or p >= 1 - level: the two runs'
    difference is no larger than what resampling the same items produces.
    """
    a, b, dropped = align(a, b)
    delta = _finite(b.value() - a.value())
    def stat(*idx: np.ndarray) -> float:  # the same items drawn for A and B
        return b.stat(*(v[i] for v, i in zip(b.values, idx))) - a.stat(*(v[i] for v, i in zip(a.values, idx)))

    iv = interval(Sample(a.names, a.keys, tuple(np.arange(len(k)) for k in a.keys), stat), n_resamples, seed, level)
    p, exact, perms = permutation_p(a, b, n_resamples, seed)
    out = {"a": _finite(a.value()), "b": _finite(b.value()), "delta": delta, "percentile": iv["percentile"], "BCa": iv["BCa"],
           "se": iv["se"], "mde": minimum_detectable(iv["se"], level), "p_value": p, "exact": exact, "permutations": perms, "n_items": iv["n_items"],
           "confidence_level": level, "n_resamples": n_resamples, "seed": seed}
    out["items_needed"] = items_needed(out["mde"], delta, sum(iv["n_items"].values()))
    if dropped:
        out["unpaired_items"] = dropped
    out["verdict"] = verdict(out, level)
    return out


def adjust(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`paired` results tested at once: each gets ``p_holm`` and ``p_bh``, and a verdict
    that only the unadjusted p carried becomes ``inside the noise after Holm's adjustment``."""
    ps = [r.get("p_value") for r in rows]
    for r, p, q in zip(rows, holm(ps), benjamini_hochberg(ps)):
        r["p_holm"], r["p_bh"] = p, q
        if p is not None and r.get("verdict") in ("B > A", "B < A") and p >= 1 - r.get("confidence_level", 0.95):
            r["verdict"] = "inside the noise after Holm's adjustment"
    return rows


def paired_series(runs: Mapping[str, Sample], against: str = "previous", n_resamples: int = 1000, seed: int = 0,
                  level: float = 0.95) -> list[dict[str, Any]]:
    """One metric along a series of runs (label -> its items, in series order): each run
    against the ``"previous"`` one or the ``"first"``, a :func:`paired` result per pair with
    ``a_run`` and ``b_run``, Holm and BH over the pairs (:func:`adjust`). A caller testing
    several metrics at once passes all their rows through :func:`adjust` itself."""
    if against not in ("previous", "first"):
        raise ValueError(f"against={against!r}: want 'previous' or 'first'")
    labels = list(runs)
    rows = []
    for i in range(1, len(labels)):
        a = labels[i - 1] if against == "previous" else labels[0]
        try:
            row = paired(runs[a], runs[labels[i]], n_resamples, seed, level)
        except ValueError as e:
            row = {"verdict": f"no test ({e})", "p_value": None}
        rows.append({"a_run": a, "b_run": labels[i], **row})
    return adjust(rows)


def items_needed(mde: float | None, delta: float | None, n: int) -> int | None:
    """How many items a test at the same level and power needs to find a difference of
    ``delta``: the standard error falls as ``1/sqrt(n)``, so ``n * (mde / |delta|)**2``
    (None without a difference or a standard error)."""
    if mde is None or not delta or n < 1:
        return None
    return int(math.ceil(n * (mde / abs(delta)) ** 2))


def verdict(row: dict[str, Any], level: float = 0.95) -> str:
    """``B > A``, ``B < A`` or ``inside the noise`` (or why there is no verdict)."""
    ci, p = row.get("percentile"), row.get("p_value")
    if p is None and row.get("interval_only"):
        p = 0.0  # a pooled comparison: the interval alone decides
    if ci is None or p is None or row.get("delta") is None:
        return "no test (too few paired items or a NaN value)"
    if ci[0] <= 0.0 <= ci[1] or p >= 1.0 - level:
        return "inside the noise"
    return "B > A" if row["delta"] > 0 else "B < A"


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of several p-values (None stays None): many metrics compared
    at once, the family-wise error held at the level."""
    idx = sorted((i for i, p in enumerate(p_values) if p is not None), key=lambda i: p_values[i])
    out: list[float | None] = [None] * len(p_values)
    m, running = len(idx), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def benjamini_hochberg(p_values: list[float | None]) -> list[float | None]:
    """Benjamini-Hochberg's adjusted p-values (None stays None): the false discovery rate held
    at the level over the metrics compared at once."""
    idx = sorted((i for i, p in enumerate(p_values) if p is not None), key=lambda i: p_values[i])
    out: list[float | None] = [None] * len(p_values)
    m, running = len(idx), 1.0
    for rank in range(m - 1, -1, -1):
        i = idx[rank]
        running = min(running, m * p_values[i] / (rank + 1))
        out[i] = running
    return out


def minimum_detectable(se: float | None, level: float = 0.95, power: float = 0.8) -> float | None:
    """The smallest difference a two-sided test at ``level`` finds with ``power``, from the
    bootstrap standard error of the difference (normal approximation): ``(z_(1-a/2) + z_power) * se``."""
    if se is None:
        return None
    z = NormalDist()
    return float((z.inv_cdf(1 - (1 - level) / 2) + z.inv_cdf(power)) * se)
