"""Truth ratio: how much likelier the model finds a paraphrased correct answer than wrong ones.

Mirrors open-unlearning at commit d3d7cf9, ``src/evals/metrics/memorization.py:107-174``
(``truth_ratio``): per item the wrong side is ``exp(-mean_j avg_loss_j)``, i.e. the
*geometric* mean of the perturbed answers' probabilities, compared with the correct
(paraphrased) answer's; the per-item values are then aggregated by one of three rules.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from ...engine import Params, Result, metric
from ...engine.knowledge import Knowledge, as_is, one_minus
from .blocks import EPS, mean_over_options, paired_block, with_reason
from .probability import probability
from .scoring import carry_truncation, qa_stats


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
    vbi = paired_block(correct, wrong, "truth ratio", "score", lambda c, w: truth_ratio_score(c["avg_loss"], w["avg_loss"], kind))
    scores = [v["score"] for v in vbi.values() if v["score"] is not None]
    agg = TRUTH_RATIO_AGGREGATORS[aggregator](scores) if scores else float("nan")
    return with_reason({"agg_value": agg, "value_by_index": vbi}, "score", "truth ratio")


class TruthRatioParams(Params):
    aggregator: str = "closer_to_1_better"  # or true_better, prob_mean


def truth_ratio_knowledge(params: TruthRatioParams) -> Knowledge:
    """The direction depends on the aggregator: ``closer_to_1_better`` is near 1 when the model
    finds right and wrong answers equally likely (forgotten); the other two grow with knowledge."""
    if params.aggregator == "closer_to_1_better":
        return one_minus("min(tr, 1/tr) is near 1 when right and wrong answers are equally likely (forgotten)")
    return as_is(f"{params.aggregator}: higher when the right answer is likelier than the wrong ones")


@metric(
    "truth_ratio",
    version="1",
    params=TruthRatioParams,
    parents={
        "correct": probability(parents={"stats": qa_stats(field="paraphrased_answer")}),
        "wrong": probability(parents={"stats": qa_stats(field="perturbed_answer")}),
    },
    knowledge=truth_ratio_knowledge,
)
def truth_ratio(correct: Result, wrong: Result, params: TruthRatioParams) -> Result:
    """Per item p(wrong, geometric mean over options) / p(correct); aggregated by ``aggregator``."""
    block = truth_ratio_block(correct.value_by_index, wrong.value_by_index, params.aggregator)
    carry_truncation(block["value_by_index"], correct.value_by_index, wrong.value_by_index)
    return Result.from_dict(block)
