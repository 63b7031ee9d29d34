"""Membership-inference attacks: per-sample scores and the AUC of forget vs holdout.

Mirrors open-unlearning at commit d3d7cf9:

* ``src/evals/metrics/mia/*.py``: each attack gives every sample a *non-membership*
  score (higher = less likely seen in training).

  - LOSS (``loss.py``): ``avg_loss`` of ``evaluate_probability``, eos **included**.
  - ZLib (``zlib.py``): ``avg_loss / len(zlib.compress(text.encode("utf-8")))``, text =
    the scored labels decoded with ``skip_special_tokens=True`` (tokenizer's default
    ``clean_up_tokenization_spaces``); with the boundary quirk the first answer token
    is not in it.
  - Min-K% (``min_k.py``): last scored token dropped (``tokenwise_logprobs``,
    ``metrics/utils.py:129-131``), log-probs sorted ascending, ``-mean`` of the lowest
    ``max(1, int(n*k))``; no token left scores 0.
  - Min-K%++ (``min_k_plus_plus.py``): per token ``(logprob - mu)/sqrt(max(var, 1e-6))``
    with ``mu``/``var`` of the log-probs under the model's own distribution (computed
    there in float32 as ``sum p*lp`` and ``sum p*lp^2 - mu^2``); then the same bottom-k.
  - Reference (``reference.py``): ``avg_loss_target - avg_loss_reference``, eos included.
  - GradNorm (``gradnorm.py``): the request's value, passed through.
  - AUC (``mia/utils.py:30-70``): ``roc_auc_score([0]*|forget| + [1]*|holdout|, scores)``,
    computed here as the Mann-Whitney U statistic with average ranks, which is what
    sklearn's trapezoidal ROC area equals, ties counted one half.

Scores are computed in float64; open-unlearning works in float32, so per-item scores
agree to ~1e-6 relative. The formulas are pure numpy/scipy; the attack metrics below
apply them to ``qa_stats`` (and ``grad_norms``) nodes on the forget and holdout rows.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Sequence

import numpy as np

from ...engine import Params, Result, metric
from ...engine.knowledge import distance_from
from .blocks import as_float_array, index_keys
from .probability import avg_loss
from .scoring import grad_norms, note_truncation, qa_stats, rows_of

VAR_FLOOR = 1e-6  # min_k_plus_plus.py:32


# ------------------------------------------------------------------ per-sample scores


def mia_loss_score(logprob: Any) -> float:
    """LOSS attack: the average loss over every scored token (eos included)."""
    return avg_loss(logprob)


def zlib_length(text: str) -> int:
    """Bytes of ``zlib.compress(text.encode("utf-8"))`` at zlib's default level."""
    return len(zlib.compress(text.encode("utf-8")))


def mia_zlib_score(logprob: Any, text: str) -> float:
    """ZLib attack: ``avg_loss / zlib_length(text)``; ``text`` = decoded scored labels."""
    return avg_loss(logprob) / zlib_length(text)


def _bottom_k_mean(values: np.ndarray, k: float) -> float:
    num_k = max(1, int(len(values) * k))  # int() truncates the float product, as there
    return float(-np.mean(np.sort(values)[:num_k]))


def _check_k(k: float) -> None:
    if not (0.0 < k <= 1.0):
        raise ValueError(f"Min-K% needs 0 < k <= 1, got {k}")


def mia_min_k_score(logprob: Any, *, k: float, exclude_last: bool = True) -> float:
    """Min-K% attack on the scored log-probs without the last token; empty scores 0.

    open-unlearning's class default is k=0.2, every TOFU/MUSE config sets 0.4, so
    ``k`` has no default here. ``exclude_last=False`` keeps the last scored token.
    """
    _check_k(k)
    lp = as_float_array(logprob, "logprob")
    lp = lp[:-1] if exclude_last else lp
    if lp.size == 0:
        return 0.0
    return _bottom_k_mean(lp, k)


def mia_min_k_plus_plus_score(logprob: Any, mu: Any, var: Any, *, k: float, exclude_last: bool = True) -> float:
    """Min-K%++ attack: standardised log-probs, last token dropped, bottom-k, negated.

    ``var`` is clamped at 1e-6 *before* the square root. Where the model is nearly
    certain, ``var`` is float32 round-off and the score amplifies it; such items are
    reproducible only up to that noise (see docs/gotchas.md).
    """
    _check_k(k)
    lp = as_float_array(logprob, "logprob")
    m, v = as_float_array(mu, "mu"), as_float_array(var, "var")
    if not (lp.shape == m.shape == v.shape):
        raise ValueError(f"logprob, mu and var lengths differ: {lp.size}, {m.size}, {v.size}")
    if exclude_last:
        lp, m, v = lp[:-1], m[:-1], v[:-1]
    if lp.size == 0:
        return 0.0
    z = (lp - m) / np.sqrt(np.maximum(v, VAR_FLOOR))
    return _bottom_k_mean(z, k)


def mia_reference_score(logprob: Any, reference_logprob: Any) -> float:
    """Reference attack: target avg_loss minus the reference model's, same tokens."""
    return avg_loss(logprob) - avg_loss(reference_logprob)


def mia_gradnorm_score(grad_norm: float) -> float:
    """GradNorm attack: the ``GradNorm`` request's value (mean of per-tensor norms)."""
    return float(grad_norm)


# ------------------------------------------------------------------ AUC and the block


def auc(forget_scores: Sequence[float], holdout_scores: Sequence[float]) -> float:
    """ROC AUC with labels 0 = forget, 1 = holdout, exactly as sklearn's ``roc_auc_score``.

    ``AUC = (sum of holdout ranks - n1(n1+1)/2) / (n0 n1)`` with average ranks for
    ties, i.e. P(holdout > forget) + P(tie)/2. 1.0 means every forget item looks far
    more "member" than every holdout item. Errors like sklearn's on one empty side or
    NaN scores, naming which.
    """
    f = np.asarray(forget_scores, dtype=np.float64).reshape(-1)
    h = np.asarray(holdout_scores, dtype=np.float64).reshape(-1)
    if f.size == 0 or h.size == 0:
        side = "forget" if f.size == 0 else "holdout"
        raise ValueError(f"AUC is undefined: the {side} side has no scores (sklearn: only one class present)")
    for name, arr in (("forget", f), ("holdout", h)):
        if not np.all(np.isfinite(arr)):
            bad = np.flatnonzero(~np.isfinite(arr))[:5].tolist()
            raise ValueError(f"AUC input contains NaN/inf in the {name} scores at positions {bad}")
    from scipy.stats import rankdata  # imported here: scipy.stats costs ~0.5 s and warm runs never get here

    ranks = rankdata(np.concatenate([f, h]), method="average")
    u = ranks[f.size :].sum() - h.size * (h.size + 1) / 2.0
    return float(u / (f.size * h.size))


def _side(scores: Sequence[float], indices: Sequence[Any] | None) -> dict[str, Any]:
    keys = index_keys(len(scores), indices)
    vals = [float(s) for s in scores]
    return {
        "agg_value": float(np.mean(vals)) if vals else float("nan"),
        "value_by_index": {k: {"score": v} for k, v in zip(keys, vals)},
    }


def mia_block(
    forget_scores: Sequence[float],
    holdout_scores: Sequence[float],
    forget_indices: Sequence[Any] | None = None,
    holdout_indices: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """open-unlearning's MIA result: ``{"forget", "holdout", "auc", "agg_value"}``.

    Each side is ``{"agg_value": mean score, "value_by_index": {"<row>": {"score"}}}``;
    ``auc`` and ``agg_value`` are the same number.
    """
    value = auc(forget_scores, holdout_scores)
    return {
        "forget": _side(forget_scores, forget_indices),
        "holdout": _side(holdout_scores, holdout_indices),
        "auc": value,
        "agg_value": value,
    }


# ------------------------------------------------------------------ the attacks

_FORGET = qa_stats(field="answer")
_HOLDOUT = qa_stats(field="answer", bind={"data": "holdout"})


class KParams(Params):
    k: float = 0.4  # open-unlearning's TOFU and MUSE configs (its class default is 0.2)


def _attack(forget: dict, holdout: dict, score: Callable) -> Result:
    f = [score(opts[0]) for opts in rows_of(forget)]
    h = [score(opts[0]) for opts in rows_of(holdout)]
    return Result.from_dict(_note_sides(mia_block(f, h), forget, holdout))


def _note_sides(block: dict, forget: dict, holdout: dict) -> dict:
    """``truncated_tokens`` on the forget/holdout items whose scored text was cut."""
    note_truncation(block["forget"], forget)
    note_truncation(block["holdout"], holdout)
    return block


#: every attack's AUC: 0.5 is "cannot tell forget rows from holdout rows", either side is knowledge
MIA_KNOWLEDGE = distance_from(0.5, "an AUC of 0.5 cannot tell forget rows from holdout rows (forgotten); "
                                   "away from 0.5 on either side it can, so |AUC - 0.5|, never the AUC itself")


@metric("mia_loss", version="2", parents={"forget": _FORGET, "holdout": _HOLDOUT}, knowledge=MIA_KNOWLEDGE)
def mia_loss(forget: dict, holdout: dict) -> Result:
    """LOSS attack: average loss (eos included) as the non-membership score; AUC forget vs holdout."""
    return _attack(forget, holdout, lambda s: mia_loss_score(s.logprob))


@metric("mia_zlib", version="2", parents={"forget": _FORGET, "holdout": _HOLDOUT}, knowledge=MIA_KNOWLEDGE)
def mia_zlib(forget: dict, holdout: dict) -> Result:
    """ZLib attack: average loss divided by the zlib-compressed length of the scored text."""
    return _attack(forget, holdout, lambda s: mia_zlib_score(s.logprob, s.text))


@metric("mia_min_k", version="2", params=KParams, parents={"forget": _FORGET, "holdout": _HOLDOUT}, knowledge=MIA_KNOWLEDGE)
def mia_min_k(forget: dict, holdout: dict, params: KParams) -> Result:
    """Min-K% attack: negated mean of the lowest k-fraction of token log-probs (eos dropped)."""
    return _attack(forget, holdout, lambda s: mia_min_k_score(s.logprob, k=params.k))


@metric("mia_min_k_plus_plus", version="2", params=KParams, parents={"forget": _FORGET, "holdout": _HOLDOUT}, knowledge=MIA_KNOWLEDGE,
        uses={"token_stats": ("mu", "var")})
def mia_min_k_plus_plus(forget: dict, holdout: dict, params: KParams) -> Result:
    """Min-K%++ attack: Min-K% on log-probs standardised by the model's own mean and variance."""
    return _attack(forget, holdout, lambda s: mia_min_k_plus_plus_score(s.logprob, s.mu, s.var, k=params.k))


@metric(
    "mia_reference",
    version="1",
    parents={
        "forget": _FORGET,
        "holdout": _HOLDOUT,
        "ref_forget": qa_stats(field="answer", bind={"model": "reference_model"}),
        "ref_holdout": qa_stats(field="answer", bind={"model": "reference_model", "data": "holdout"}),
    },
    knowledge=MIA_KNOWLEDGE,
)
def mia_reference(forget: dict, holdout: dict, ref_forget: dict, ref_holdout: dict) -> Result:
    """Reference attack: the target's average loss minus the reference model's on the same text."""
    f = [mia_reference_score(a[0].logprob, b[0].logprob) for a, b in zip(rows_of(forget), rows_of(ref_forget))]
    h = [mia_reference_score(a[0].logprob, b[0].logprob) for a, b in zip(rows_of(holdout), rows_of(ref_holdout))]
    return Result.from_dict(_note_sides(mia_block(f, h), forget, holdout))


@metric("mia_gradnorm", version="2", parents={"forget": grad_norms(), "holdout": grad_norms(bind={"data": "holdout"})},
        knowledge=MIA_KNOWLEDGE)
def mia_gradnorm(forget: dict, holdout: dict) -> Result:
    """GradNorm attack: mean over parameters of each parameter's gradient norm, per item."""
    block = mia_block([mia_gradnorm_score(x) for x in forget["values"]], [mia_gradnorm_score(x) for x in holdout["values"]])
    return Result.from_dict(_note_sides(block, forget, holdout))
