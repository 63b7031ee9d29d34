"""A metric's knowledge orientation: the form of its value in which higher means more knowledge.

Why: a robustness score compares a metric before and after an attack on the model, and a
meta-evaluation ranks models by a metric; both need to know which way is "knows more".
That direction differs from metric to metric (a forget truth ratio is high when the model
has forgotten; an MIA AUC is 0.5 when it has forgotten and far from 0.5 either way when it
knows), so each metric declares it where it is declared (``@metric(..., knowledge=...)``)
and nothing downstream guesses. The form is fixed in advance: a meta-evaluation never
picks the direction that separates better after seeing the data.

A form is *positive* when its values are never negative for any value the metric can give
(so a ratio ``before / after`` means something); a signed form (privleak) still serves
differences (the relearning score R) but not ratios (the quantization score Q).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Knowledge:
    """``formula`` (with ``x`` the metric's value) as text; ``fn`` computes it; ``why`` says
    why this is the direction of more knowledge."""

    formula: str
    fn: Callable[[float], float]
    positive: bool
    why: str

    def __call__(self, x: float | None) -> float | None:
        """The knowledge form of one value (None for a missing or non-finite value)."""
        if x is None or not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(float(x)):
            return None
        y = float(self.fn(float(x)))
        return y if math.isfinite(y) else None

    def as_dict(self) -> dict[str, Any]:
        return {"formula": self.formula, "positive": self.positive, "why": self.why}


def as_is(why: str) -> Knowledge:
    """Higher already means more knowledge, and the value is never negative (a probability, a ROUGE)."""
    return Knowledge("x", lambda x: x, True, why)


def one_minus(why: str) -> Knowledge:
    """A value in [0, 1] that is high when the model has forgotten."""
    return Knowledge("1 - x", lambda x: 1.0 - x, True, why)


def distance_from(centre: float, why: str) -> Knowledge:
    """Not monotone in knowledge: ``centre`` is "knows nothing", either side is knowledge."""
    return Knowledge(f"|x - {centre:g}|", lambda x: abs(x - centre), True, why)


def neg_log10(why: str) -> Knowledge:
    """A p-value that is high when the model is indistinguishable from one that never learned."""
    return Knowledge("-log10(x)", lambda x: -math.log10(x) if x > 0 else math.inf, True, why)


def exp_of(why: str) -> Knowledge:
    """A log-probability (<= 0, higher = more knowledge) made positive: the probability itself."""
    return Knowledge("exp(x)", math.exp, True, why)


def signed(scale: float, why: str) -> Knowledge:
    """Signed, with more knowledge towards ``sign(scale)``: fine for differences, not for ratios."""
    return Knowledge(f"{scale:g} * x", lambda x: scale * x, False, why)


def knowledge_of(metric: Any, params: Any = None) -> Knowledge | None:
    """The declared form of a metric (a ``MetricDef``) for one node's params; None: none declared.

    A metric declares either a :class:`Knowledge` or a function of its params returning one
    (the truth ratio's direction depends on its aggregator).
    """
    k = getattr(metric, "knowledge", None)
    if k is None or isinstance(k, Knowledge):
        return k
    return k(params)


def of_node(node: Any) -> Knowledge | None:
    """The declared form of a configured node (``declare.Node``)."""
    return knowledge_of(node.metric, node.params)
