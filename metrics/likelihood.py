"""Likelihood metrics: length-normalised probability, normalised probability, truth ratio.

Pure functions from per-token log-probs (a ``TokenStats`` result's ``logprob``) to
open-unlearning's result shape ``{"agg_value", "value_by_index": {"<row>": {...}}}``.
They mirror open-unlearning at commit d3d7cf9:

* ``src/evals/metrics/utils.py:82-103`` ``evaluate_probability``: ``avg_loss`` is the
  mean NLL over every scored token, **the trailing eos included**, and ``prob =
  exp(-avg_loss)``; zero scored tokens give 0/0 = NaN there (kept, with a reason here).
* ``src/evals/metrics/memorization.py:20-41`` ``probability``: the mean over items of
  ``prob``, an item with several answers (perturbed) first averaged over its options
  (``aggregate_to_1D``: the arithmetic mean of probabilities, not of losses).
* ``memorization.py:44-72`` ``probability_w_options``: ``p / (p + sum_j p_j + 1e-10)``.
* ``memorization.py:107-174`` ``truth_ratio``: the wrong side is ``exp(-mean_j
  avg_loss_j)``, i.e. the *geometric* mean of the options' probabilities.

Row keys are strings, as in open-unlearning's JSON. This module also holds the tiny
helpers the sibling metric modules share (no model, no file, no torch).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

NO_TARGET_REASON = (
    "no scored tokens: the prompt and prompt+answer tokenize to the same length, so "
    "open-unlearning masks every label and divides 0 by 0"
)
EPS = 1e-10  # open-unlearning's guard in every ratio


# ------------------------------------------------------------------ shared helpers


def as_float_array(values: Any, name: str = "values") -> np.ndarray:
    """A 1-D float64 copy; float32 model outputs are widened exactly, never rounded."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of per-token values, got shape {arr.shape}")
    return arr


def index_keys(n: int, indices: Sequence[Any] | None = None) -> list[str]:
    """Row keys as strings; ``indices`` defaults to the row positions ``0..n-1``.

    open-unlearning keys ``value_by_index`` by the dataset's row position
    (``add_dataset_index``, ``src/data/utils.py:323``), so that is the default.
    """
    if indices is None:
        return [str(i) for i in range(n)]
    if len(indices) != n:
        raise ValueError(f"got {len(indices)} indices for {n} items")
    keys = [str(i) for i in indices]
    if len(set(keys)) != n:
        raise ValueError("indices repeat: every item needs its own row index")
    return keys


def mean_over_options(x: Any) -> float:
    """``aggregate_to_1D`` for one item: a scalar stays, a list of options is averaged."""
    if isinstance(x, (list, tuple, np.ndarray)):
        return float(np.mean(np.asarray(x, dtype=np.float64)))
    return float(x)


def mean_of_field(value_by_index: Mapping[str, Any], field: str) -> float:
    """Mean over items of ``field``, each item first averaged over its options.

    Items whose field is None are skipped, as open-unlearning's ``if evals[field] is
    not None`` filters do; a NaN is kept and makes the mean NaN (also as there).
    """
    vals = [mean_over_options(v[field]) for v in value_by_index.values() if v[field] is not None]
    if not vals:
        return float("nan")
    return float(np.mean(vals))


def nan_items(value_by_index: Mapping[str, Any], field: str, limit: int = 5) -> list[str]:
    """The first few row keys whose ``field`` is NaN (to name them in a reason)."""
    out: list[str] = []
    for key, item in value_by_index.items():
        val = item.get(field)
        if val is not None and math.isnan(mean_over_options(val)):
            out.append(key)
            if len(out) == limit:
                break
    return out


def with_reason(block: dict[str, Any], field: str, what: str) -> dict[str, Any]:
    """Attach a ``reason`` naming the NaN items when the block's agg_value is NaN."""
    agg = block.get("agg_value")
    if isinstance(agg, float) and math.isnan(agg):
        rows = nan_items(block.get("value_by_index") or {}, field)
        block["reason"] = f"{what} is NaN: NaN {field} at rows {rows}" if rows else f"{what} is NaN: no items"
    return block


# ------------------------------------------------------------------ probability


def avg_loss(logprob: Any) -> float:
    """Mean negative log-likelihood over the scored tokens (eos included); NaN when empty.

    Summed in float64: open-unlearning sums float32 cross-entropies, so the two agree
    to about 1e-7 relative, well inside the batch-composition noise of the reference.
    """
    lp = as_float_array(logprob, "logprob")
    if lp.size == 0:
        return float("nan")
    return float(-lp.sum() / lp.size)


def probability_item(logprob: Any) -> dict[str, Any]:
    """``{"prob": exp(-avg_loss), "avg_loss"}`` for one sequence, with a reason if NaN."""
    loss = avg_loss(logprob)
    item: dict[str, Any] = {"prob": float(math.exp(-loss)), "avg_loss": loss}
    if math.isnan(loss):
        item["reason"] = NO_TARGET_REASON
    return item


def probability_options_item(logprobs: Sequence[Any]) -> dict[str, Any]:
    """One item with K answers: ``{"prob": [K], "avg_loss": [K]}`` (open-unlearning's
    ``dict_transpose`` of its K mini-batches, ``metrics/utils.py:15-32``)."""
    if len(logprobs) == 0:
        raise ValueError("an item with options needs at least one option")
    singles = [probability_item(lp) for lp in logprobs]
    item: dict[str, Any] = {"prob": [s["prob"] for s in singles], "avg_loss": [s["avg_loss"] for s in singles]}
    bad = [j for j, s in enumerate(singles) if "reason" in s]
    if bad:
        item["reason"] = f"options {bad}: {NO_TARGET_REASON}"
    return item


def probability_block(logprobs: Sequence[Any], indices: Sequence[Any] | None = None) -> dict[str, Any]:
    """Q_A_Prob / Q_A_PARA_Prob: one answer per item; ``agg_value`` = mean prob."""
    keys = index_keys(len(logprobs), indices)
    vbi = {k: probability_item(lp) for k, lp in zip(keys, logprobs)}
    return with_reason({"agg_value": mean_of_field(vbi, "prob"), "value_by_index": vbi}, "prob", "probability")


def probability_options_block(
    logprobs: Sequence[Sequence[Any]], indices: Sequence[Any] | None = None
) -> dict[str, Any]:
    """Q_A_PERT_Prob: K answers per item; ``agg_value`` = mean_i mean_j p_ij."""
    keys = index_keys(len(logprobs), indices)
    vbi = {k: probability_options_item(opts) for k, opts in zip(keys, logprobs)}
    return with_reason({"agg_value": mean_of_field(vbi, "prob"), "value_by_index": vbi}, "prob", "probability")


# ------------------------------------------------------------------ paired metrics


def _paired_items(correct: Mapping[str, Any], wrong: Mapping[str, Any], what: str) -> list[str]:
    """The shared row keys, in order; open-unlearning asserts both key lists are equal."""
    ck, wk = [str(k) for k in correct], [str(k) for k in wrong]
    if ck != wk:
        missing = sorted(set(ck) ^ set(wk))[:5]
        raise ValueError(f"{what}: correct and wrong results cover different rows (e.g. {missing}) or order")
    return ck


def _paired_block(correct: Mapping[str, Any], wrong: Mapping[str, Any], what: str, field: str, score: Callable[[Any, Any], float]) -> dict[str, Any]:
    """``{row: {field: score(correct_item, wrong_item)}}`` over the rows both sides share."""
    vbi: dict[str, Any] = {}
    for k in _paired_items(correct, wrong, what):
        c, w = correct[k], wrong[k]
        if c is None or w is None:
            vbi[k] = {field: None, "reason": "missing correct or wrong result"}
        else:
            vbi[k] = {field: score(c, w)}
    return vbi


def _normalised(c: Mapping[str, Any], w: Mapping[str, Any]) -> float:
    pc = mean_over_options(c["prob"])
    pw = float(np.sum(np.asarray(w["prob"], dtype=np.float64)))
    return pc / (pc + pw + EPS)


def normalised_probability_block(correct: Mapping[str, Any], wrong: Mapping[str, Any]) -> dict[str, Any]:
    """ra/wf_Q_A_Prob_normalised: ``p_c / (p_c + sum_j p_j + 1e-10)`` per item, then the mean.

    ``correct`` / ``wrong`` are the ``value_by_index`` of Q_A_Prob and Q_A_PERT_Prob.
    The wrong side is a *sum* over options (``memorization.py:68``).
    """
    vbi = _paired_block(correct, wrong, "normalised probability", "prob", _normalised)
    return with_reason({"agg_value": mean_of_field(vbi, "prob"), "value_by_index": vbi}, "prob", "normalised probability")


def truth_ratio_score(correct_avg_loss: Any, wrong_avg_losses: Any, kind: str = "ratio") -> float:
    """One item's truth ratio from average losses.

    ``kind="ratio"`` (TOFU's original): ``exp(-mean_j L_j) / (exp(-L_c) + 1e-10)``.
    ``kind="prob_mean"`` (#163): ``p_c / (p_c + p_w + 1e-10)`` with the same p_w.
    A list of correct losses (not used by the configs) is averaged like the wrong side.
    """
    pc = math.exp(-mean_over_options(correct_avg_loss))
    pw = math.exp(-mean_over_options(wrong_avg_losses))
    if kind == "ratio":
        return pw / (pc + EPS)
    if kind == "prob_mean":
        return pc / (pc + pw + EPS)
    raise ValueError(f"truth ratio kind must be 'ratio' or 'prob_mean', not {kind!r}")


def closer_to_1_better(scores: Any) -> float:
    """Forget side: ``mean(min(tr, 1/(tr+1e-10)))`` (``memorization.py:114``)."""
    arr = np.asarray(scores, dtype=np.float64)
    return float(np.mean(np.minimum(arr, 1.0 / (arr + EPS))))


def true_better(scores: Any) -> float:
    """Retain/ra/wf side: ``mean(max(0, 1 - tr))`` (``memorization.py:119``)."""
    arr = np.asarray(scores, dtype=np.float64)
    return float(np.mean(np.maximum(0.0, 1.0 - arr)))


def prob_mean(scores: Any) -> float:
    """``mean(tr)`` where tr was redefined as ``p_c/(p_c+p_w)`` (``memorization.py:123``)."""
    return float(np.mean(np.asarray(scores, dtype=np.float64)))


TRUTH_RATIO_AGGREGATORS: dict[str, Callable[[Any], float]] = {
    "closer_to_1_better": closer_to_1_better,
    "true_better": true_better,
    "prob_mean": prob_mean,
}


def truth_ratio_block(
    correct: Mapping[str, Any], wrong: Mapping[str, Any], aggregator: str = "closer_to_1_better"
) -> dict[str, Any]:
    """Truth ratio from the ``value_by_index`` of a correct and a wrong probability block.

    Quirk kept: a NaN item (no scored tokens) stays NaN and makes ``agg_value`` NaN.
    Quirk *not* kept: open-unlearning drops None items and then zips the remaining ratios
    with *all* row keys (``memorization.py:169``), shifting later rows; here every score
    stays on its own row and a None item is skipped by the aggregator. In open-unlearning
    a None never occurs, so the numbers are the same.
    """
    if aggregator not in TRUTH_RATIO_AGGREGATORS:
        raise ValueError(f"invalid truth ratio aggregator {aggregator!r}; use one of {sorted(TRUTH_RATIO_AGGREGATORS)}")
    kind = "prob_mean" if aggregator == "prob_mean" else "ratio"
    vbi = _paired_block(correct, wrong, "truth ratio", "score", lambda c, w: truth_ratio_score(c["avg_loss"], w["avg_loss"], kind))
    scores = [v["score"] for v in vbi.values() if v["score"] is not None]
    agg = TRUTH_RATIO_AGGREGATORS[aggregator](scores) if scores else float("nan")
    return with_reason({"agg_value": agg, "value_by_index": vbi}, "score", "truth ratio")


# ------------------------------------------------------------------ graph nodes

from ..engine import Params, Result, metric  # noqa: E402
from .scoring import QAParams, has_options, qa_stats, rows_of  # noqa: E402


@metric("probability", version="1", parents={"stats": qa_stats(field="answer")})
def probability(stats: dict) -> Result:
    """Q_A_Prob, Q_A_PARA_Prob, Q_A_PERT_Prob: exp(-avg_loss) per item (per option), averaged."""
    rows = rows_of(stats)
    if has_options(stats):
        return Result.from_dict(probability_options_block([[o.logprob for o in opts] for opts in rows]))
    return Result.from_dict(probability_block([opts[0].logprob for opts in rows]))


@metric(
    "probability_normalised",
    version="1",
    parents={"correct": probability(), "wrong": probability(parents={"stats": qa_stats(field="perturbed_answer")})},
)
def probability_normalised(correct: Result, wrong: Result) -> Result:
    """ra/wf_Q_A_Prob_normalised: p_correct / (p_correct + sum of p_wrong)."""
    return Result.from_dict(normalised_probability_block(correct.value_by_index, wrong.value_by_index))


class TruthRatioParams(Params):
    aggregator: str = "closer_to_1_better"  # or true_better, prob_mean


@metric(
    "truth_ratio",
    version="1",
    params=TruthRatioParams,
    parents={
        "correct": probability(parents={"stats": qa_stats(field="paraphrased_answer")}),
        "wrong": probability(parents={"stats": qa_stats(field="perturbed_answer")}),
    },
)
def truth_ratio(correct: Result, wrong: Result, params: TruthRatioParams) -> Result:
    """Per item p(wrong, geometric mean over options) / p(correct); aggregated by ``aggregator``."""
    return Result.from_dict(truth_ratio_block(correct.value_by_index, wrong.value_by_index, params.aggregator))


__all__ = ["QAParams", "probability", "probability_normalised", "truth_ratio"]
