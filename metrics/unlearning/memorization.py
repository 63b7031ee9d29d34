"""Memorization metrics from teacher-forced argmax predictions: extraction strength and
exact memorization.

Mirrors open-unlearning at commit d3d7cf9, ``src/evals/metrics/memorization.py``
(``exact_memorization`` 177-219, ``extraction_strength`` 222-269) on top of
``tokenwise_vocab_logprobs`` (``metrics/utils.py:149-190``), which drops the **last**
scored token (``actual_indices[:-1]``, "to ignore eos prediction"). For TOFU QA that
token is the appended eos; for MUSE completion data (no eos appended) it is the last
real text token, dropped all the same.

Inputs are the continuation's ``argmax`` (the model's prediction for each scored token,
a ``TokenStats`` field) and the continuation ids (the labels), both of the full scored
length; the last-token drop happens here.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...engine import Params, Result, metric
from ...engine.knowledge import as_is
from .blocks import index_keys, mean_of_field, with_reason
from .scoring import note_truncation, qa_stats, rows_of

EMPTY_REASON = "no scored tokens once the last one is dropped"


def _preds_labels(argmax: Any, labels: Any, exclude_last: bool) -> tuple[np.ndarray, np.ndarray]:
    preds = np.asarray(argmax, dtype=np.int64).reshape(-1)
    labs = np.asarray(labels, dtype=np.int64).reshape(-1)
    if preds.shape != labs.shape:
        raise ValueError(f"argmax has {preds.size} tokens but labels have {labs.size}")
    return (preds[:-1], labs[:-1]) if exclude_last else (preds, labs)


def extraction_strength(argmax: Any, labels: Any, *, exclude_last: bool = True, strict: bool = False) -> float:
    """``1 - k/n`` with k the start of the longest correctly predicted suffix.

    Quirk kept (``memorization.py:237-253``): the search loop runs ``k`` over
    ``0..n-1`` and breaks at the first matching suffix; when even the one-token suffix
    fails, the loop ends with ``k = n-1`` and the score is ``1/n``, not 0. So the
    score is ``1 - min(k*, n-1)/n`` where ``k*`` is one past the last mismatch.
    ``n = 0`` scores 0 (open-unlearning's comment says None, its code appends 0).
    ``strict=True`` scores "no matching suffix" as 0 (``k = n``) instead;
    ``exclude_last=False`` keeps the last scored token.
    """
    preds, labs = _preds_labels(argmax, labels, exclude_last)
    n = preds.size
    if n == 0:
        return 0.0
    mismatch = np.flatnonzero(preds != labs)
    k_star = int(mismatch[-1]) + 1 if mismatch.size else 0
    k = k_star if strict else min(k_star, n - 1)
    return 1.0 - k / n


def exact_memorization(argmax: Any, labels: Any, *, exclude_last: bool = True) -> float | None:
    """Fraction of scored tokens (last one dropped) whose argmax equals the label.

    None when nothing is left to score (``memorization.py:190-200``); such items are
    skipped by the mean. open-unlearning divides in float32 (``.sum() / valid_len`` on
    tensors), so its per-item values differ from these float64 ones by ~1e-8.
    ``exclude_last=False`` keeps the last scored token (the eos, for QA data).
    """
    preds, labs = _preds_labels(argmax, labels, exclude_last)
    if preds.size == 0:
        return None
    return float(np.mean(preds == labs))


def _score_block(scores: list[float | None], indices: Sequence[Any] | None, what: str) -> dict[str, Any]:
    keys = index_keys(len(scores), indices)
    vbi: dict[str, Any] = {}
    for k, s in zip(keys, scores):
        vbi[k] = {"score": s} if s is not None else {"score": None, "reason": EMPTY_REASON}
    return with_reason({"agg_value": mean_of_field(vbi, "score"), "value_by_index": vbi}, "score", what)


def _per_item_block(score: Any, argmaxes: Sequence[Any], labels: Sequence[Any], indices: Sequence[Any] | None,
                    what: str, options: dict) -> dict[str, Any]:
    if len(argmaxes) != len(labels):
        raise ValueError(f"{len(argmaxes)} argmax arrays for {len(labels)} label arrays")
    return _score_block([score(a, lab, **options) for a, lab in zip(argmaxes, labels)], indices, what)


def extraction_strength_block(
    argmaxes: Sequence[Any], labels: Sequence[Any], indices: Sequence[Any] | None = None, **options: bool
) -> dict[str, Any]:
    """Per-item extraction strength and their mean (``options`` as :func:`extraction_strength`)."""
    return _per_item_block(extraction_strength, argmaxes, labels, indices, "extraction strength", options)


def exact_memorization_block(
    argmaxes: Sequence[Any], labels: Sequence[Any], indices: Sequence[Any] | None = None, **options: bool
) -> dict[str, Any]:
    """Per-item exact memorization and the mean over items that have a score."""
    return _per_item_block(exact_memorization, argmaxes, labels, indices, "exact memorization", options)


# ------------------------------------------------------------------ the metrics


class MemorizationParams(Params):
    exclude_last: bool = True  # open-unlearning drops the last scored token (the eos)
    strict: bool = False  # True: "no matching suffix" scores 0 instead of open-unlearning's 1/n


@metric("extraction_strength", version="1", params=MemorizationParams, parents={"stats": qa_stats(field="answer")},
        knowledge=as_is("the share of the answer the model completes by itself: more when it has it memorized"))
def extraction_strength_node(stats: dict, params: MemorizationParams) -> Result:
    """1 - k/n, k the start of the longest suffix the model predicts correctly (teacher forcing)."""
    rows = [opts[0] for opts in rows_of(stats)]
    block = extraction_strength_block([r.argmax for r in rows], [r.labels for r in rows], exclude_last=params.exclude_last, strict=params.strict)
    return Result.from_dict(note_truncation(block, stats))


@metric("exact_memorization", version="1", params=MemorizationParams, parents={"stats": qa_stats(field="answer")},
        knowledge=as_is("the share of answer tokens the model predicts: more when it has the answer memorized"))
def exact_memorization_node(stats: dict, params: MemorizationParams) -> Result:
    """Share of scored tokens whose teacher-forced argmax is the label."""
    rows = [opts[0] for opts in rows_of(stats)]
    block = exact_memorization_block([r.argmax for r in rows], [r.labels for r in rows], exclude_last=params.exclude_last)
    return Result.from_dict(note_truncation(block, stats))
