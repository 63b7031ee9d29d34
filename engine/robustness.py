"""Robustness of a metric under an attack on the model: the relearning score R, the
quantization score Q and their harmonic mean, each formula named with its source.

Why: an unlearned model whose forgotten knowledge comes back after a few steps of
fine-tuning or a 4-bit round trip was only hiding it; a metric that reported it forgotten
was fooled. OpenUnlearning (Dorna et al., arXiv 2506.12618, Sec. 4, Eq. 2-4) scores how far
each metric is fooled from its values before and after the attack:

* relearning, with the retain model relearned by the same recipe as the control:
  ``R = (m_ret,after - m_ret,before) / (m_unl,after - m_unl,before)``, clipped to [0, 1];
* quantization: ``Q = m_before / m_after``, clipped to [0, 1];
* ``HM(R, Q) = 2RQ / (R + Q)``.

``m`` is always the metric's knowledge form (``knowledge.py``: higher = more knowledge),
never its raw value, so the direction is part of the formula. The unlearning-depth-score
project (github.com/gnueaj/unlearning-depth-score, ``docs/data/meta_eval.json``) publishes a
symmetric variant that penalises a change either way:
``R = 1 - clip(|D_unl - D_ret| / (|D_unl| + |D_ret| + eps), 0, 1)`` and
``Q = 1 - clip(|m_after - m_before| / (|m_before| + |m_after| + eps), 0, 1)``.

Edge cases (each score is a number or None with the reason):

* R, OpenUnlearning: ``|D_unl|`` below the minimum (``min_delta``, and, where the metric has
  items, a change inside the item-level noise: ``relearn_score``'s ``noise``) gives None
  ("undefined"), never a number: a ratio over noise is noise. That covers "no change" and
  a zero denominator. A change of the wrong sign (the attack lowered the unlearned model's
  knowledge while the retain model gained) gives a negative ratio, clipped to 0.
* Q, OpenUnlearning: needs a positive form (refused by name otherwise, and a negative value
  is refused); ``m_after = 0`` gives 1 (nothing came back: ``m_before / 0`` clipped), so
  does no change; more knowledge after the attack gives < 1.
* symmetric: no change at all gives 1 on both; the forms are used as they are (no
  positivity needed: only differences and magnitudes).
* HM: None when R or Q is None; 0 when either is 0 (the limit of ``2RQ/(R+Q)``).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Callable

#: below this |D_unl| the relearning ratio is undefined even without item-level noise
MIN_DELTA = 1e-8
#: the symmetric variant's eps (the project publishes "+ eps" without its value)
SYMMETRIC_EPS = 1e-8


@dataclass(frozen=True)
class Score:
    """A robustness score: ``value`` in [0, 1] or None with ``reason``; ``raw`` before clipping."""

    value: float | None
    raw: float | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value}
        if self.raw is not None and self.raw != self.value:  # JSON has no infinity: "+inf" / "-inf" as text
            out["raw"] = self.raw if math.isfinite(self.raw) else ("+inf" if self.raw > 0 else "-inf")
        if self.reason:
            out["reason"] = self.reason
        return out


def _clip01(x: float) -> float:
    return min(1.0, max(0.0, x))


def _finite(*xs: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in xs)


# ------------------------------------------------------------------ OpenUnlearning


def relearn_openunlearning(unl_before: float, unl_after: float, ret_before: float, ret_after: float,
                           min_delta: float = MIN_DELTA, noise: str | None = None) -> Score:
    """``(m_ret,after - m_ret,before) / (m_unl,after - m_unl,before)`` clipped to [0, 1].

    ``noise``: why the unlearned model's change is inside its item-level noise (the paired
    test's words), which makes R undefined like a change below ``min_delta``.
    """
    if not _finite(unl_before, unl_after, ret_before, ret_after):
        return Score(None, reason="a value before or after the attack is missing or not a number")
    d_unl, d_ret = unl_after - unl_before, ret_after - ret_before
    if abs(d_unl) < min_delta:
        return Score(None, reason=f"undefined: |D_unl| = {abs(d_unl):.3g} is below the minimum {min_delta:g} (no change to relate the retain model's to)")
    if noise:
        return Score(None, reason=f"undefined: the unlearned model's change D_unl = {d_unl:+.4g} is inside the item-level noise ({noise})")
    raw = d_ret / d_unl
    return Score(_clip01(raw), raw)


def quant_openunlearning(before: float, after: float) -> Score:
    """``m_before / m_after`` clipped to [0, 1] (1 when ``m_after`` is 0: nothing came back)."""
    if not _finite(before, after):
        return Score(None, reason="a value before or after the attack is missing or not a number")
    if before < 0 or after < 0:
        return Score(None, reason=f"a negative knowledge value ({before:.4g} before, {after:.4g} after): Q is a ratio of positive values")
    if after <= 0.0:
        return Score(1.0, math.inf if before > 0 else None)
    raw = before / after
    return Score(_clip01(raw), raw)


# ------------------------------------------------------------------ symmetric (unlearning-depth-score)


def relearn_symmetric(unl_before: float, unl_after: float, ret_before: float, ret_after: float,
                      min_delta: float = MIN_DELTA, noise: str | None = None) -> Score:
    """``1 - clip(|D_unl - D_ret| / (|D_unl| + |D_ret| + eps), 0, 1)``: defined for any change
    (``min_delta`` and ``noise`` do not apply: the project applies no such rule)."""
    if not _finite(unl_before, unl_after, ret_before, ret_after):
        return Score(None, reason="a value before or after the attack is missing or not a number")
    d_unl, d_ret = unl_after - unl_before, ret_after - ret_before
    raw = 1.0 - abs(d_unl - d_ret) / (abs(d_unl) + abs(d_ret) + SYMMETRIC_EPS)
    return Score(_clip01(raw), raw)


def quant_symmetric(before: float, after: float) -> Score:
    """``1 - clip(|m_after - m_before| / (|m_before| + |m_after| + eps), 0, 1)``."""
    if not _finite(before, after):
        return Score(None, reason="a value before or after the attack is missing or not a number")
    raw = 1.0 - abs(after - before) / (abs(before) + abs(after) + SYMMETRIC_EPS)
    return Score(_clip01(raw), raw)


def harmonic(r: Score | float | None, q: Score | float | None) -> Score:
    """``2RQ / (R + Q)``; None when either is None (with its reason), 0 when either is 0."""
    rv = r.value if isinstance(r, Score) else r
    qv = q.value if isinstance(q, Score) else q
    if rv is None or qv is None:
        which = "R" if rv is None else "Q"
        why = (r if rv is None else q)
        return Score(None, reason=f"{which} is undefined" + (f" ({why.reason})" if isinstance(why, Score) and why.reason else ""))
    if rv <= 0 or qv <= 0:
        return Score(0.0)
    return Score(2 * rv * qv / (rv + qv))


# ------------------------------------------------------------------ the named formulas


@dataclass(frozen=True)
class Formula:
    """A named variant: its R and Q, their texts and where they are published."""

    name: str
    relearn: Callable[..., Score]
    quant: Callable[[float, float], Score]
    relearn_text: str
    quant_text: str
    source: str
    needs_positive: bool  # Q is a ratio: the knowledge form must be positive

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "R": self.relearn_text, "Q": self.quant_text, "HM": "2RQ / (R + Q)",
                "m": "the metric's knowledge form (higher = more knowledge)", "source": self.source}


FORMULAS: dict[str, Formula] = {
    "openunlearning": Formula(
        "openunlearning", relearn_openunlearning, quant_openunlearning,
        "clip((m_ret,after - m_ret,before) / (m_unl,after - m_unl,before), 0, 1); undefined when |D_unl| is below "
        "the minimum or inside the item-level noise",
        "clip(m_before / m_after, 0, 1); 1 when m_after = 0",
        "OpenUnlearning: Dorna et al., 'OpenUnlearning: Accelerating LLM Unlearning via Unified Benchmarking of "
        "Methods and Metrics', arXiv 2506.12618, Sec. 4, Eq. 2-4", True),
    "uds-symmetric": Formula(
        "uds-symmetric", relearn_symmetric, quant_symmetric,
        f"1 - clip(|D_unl - D_ret| / (|D_unl| + |D_ret| + eps), 0, 1), D = m_after - m_before, eps = {SYMMETRIC_EPS:g}",
        f"1 - clip(|m_after - m_before| / (|m_before| + |m_after| + eps), 0, 1), eps = {SYMMETRIC_EPS:g}",
        "unlearning-depth-score project (github.com/gnueaj/unlearning-depth-score), docs/data/meta_eval.json "
        "'formulas' (symmetric, bidirectional robustness)", False),
}
DEFAULT_FORMULA = "openunlearning"


class FormulaError(ValueError):
    """An unknown formula name, or a metric a formula cannot score: one line for the CLI."""


def formula(name: str) -> Formula:
    """The variant named ``name``; an unknown name fails with the close matches."""
    if name in FORMULAS:
        return FORMULAS[name]
    close = difflib.get_close_matches(name, list(FORMULAS), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise FormulaError(f"unknown robustness formula {name!r} (known: {', '.join(FORMULAS)}){hint}")


def refusal(metric: str, form: Any, f: Formula, score: str) -> str | None:
    """Why ``f``'s score ``score`` ("R" or "Q") refuses ``metric`` (its form ``form``); None: it does not."""
    if form is None:
        return f"{metric}: declares no knowledge form (higher = more knowledge), so {score} is refused"
    if score == "Q" and f.needs_positive and not form.positive:
        return f"{metric}: its knowledge form {form.formula} is signed; {f.name}'s Q = m_before / m_after needs a positive form"
    return None
