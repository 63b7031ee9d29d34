"""Length-normalised probability (Q_A_Prob and its kin) and normalised probability.

Pure functions from per-token log-probs (a ``TokenStats`` result's ``logprob``) to
open-unlearning's result shape, and the metrics that apply them to ``qa_stats``. They
mirror open-unlearning at commit d3d7cf9:

* ``src/evals/metrics/utils.py:82-103`` ``evaluate_probability``: ``avg_loss`` is the
  mean NLL over every scored token, **the trailing eos included**, and ``prob =
  exp(-avg_loss)``; zero scored tokens give 0/0 = NaN there (kept, with a reason here).
* ``src/evals/metrics/memorization.py:20-41`` ``probability``: the mean over items of
  ``prob``, an item with several answers (perturbed) first averaged over its options
  (``aggregate_to_1D``: the arithmetic mean of probabilities, not of losses).
* ``memorization.py:44-72`` ``probability_w_options``: ``p / (p + sum_j p_j + 1e-10)``.

Row keys are strings, as in open-unlearning's JSON.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ...engine import Result, metric
from ...engine.knowledge import as_is
from .blocks import EPS, as_float_array, index_keys, mean_of_field, mean_over_options, paired_block, with_reason
from .scoring import carry_truncation, has_options, note_truncation, qa_stats, rows_of

NO_TARGET_REASON = (
    "no scored tokens: the prompt and prompt+answer tokenize to the same length, so "
    "open-unlearning masks every label and divides 0 by 0"
)


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


def _normalised(c: Mapping[str, Any], w: Mapping[str, Any]) -> float:
    pc = mean_over_options(c["prob"])
    pw = float(np.sum(np.asarray(w["prob"], dtype=np.float64)))
    return pc / (pc + pw + EPS)


def normalised_probability_block(correct: Mapping[str, Any], wrong: Mapping[str, Any]) -> dict[str, Any]:
    """ra/wf_Q_A_Prob_normalised: ``p_c / (p_c + sum_j p_j + 1e-10)`` per item, then the mean.

    ``correct`` / ``wrong`` are the ``value_by_index`` of Q_A_Prob and Q_A_PERT_Prob.
    The wrong side is a *sum* over options (``memorization.py:68``).
    """
    vbi = paired_block(correct, wrong, "normalised probability", "prob", _normalised)
    return with_reason({"agg_value": mean_of_field(vbi, "prob"), "value_by_index": vbi}, "prob", "normalised probability")


@metric("probability", version="1", parents={"stats": qa_stats(field="answer")},
        knowledge=as_is("the mean probability of the answer: a model that knows it gives it more"))
def probability(stats: dict) -> Result:
    """Q_A_Prob, Q_A_PARA_Prob, Q_A_PERT_Prob: exp(-avg_loss) per item (per option), averaged."""
    rows = rows_of(stats)
    if has_options(stats):
        block = probability_options_block([[o.logprob for o in opts] for opts in rows])
    else:
        block = probability_block([opts[0].logprob for opts in rows])
    return Result.from_dict(note_truncation(block, stats))


@metric(
    "probability_normalised",
    version="1",
    parents={"correct": probability(), "wrong": probability(parents={"stats": qa_stats(field="perturbed_answer")})},
    knowledge=as_is("the correct answer's share of the probability: higher when the model knows which one is right"),
)
def probability_normalised(correct: Result, wrong: Result) -> Result:
    """ra/wf_Q_A_Prob_normalised: p_correct / (p_correct + sum of p_wrong)."""
    block = normalised_probability_block(correct.value_by_index, wrong.value_by_index)
    carry_truncation(block["value_by_index"], correct.value_by_index, wrong.value_by_index)
    return Result.from_dict(block)
