"""The value a metric returns: open-unlearning's ``{"agg_value", "value_by_index"}`` shape.

``Result`` is deliberately small. ``agg_value`` is the headline number (or None when the
metric cannot be computed, e.g. forget quality without retain logs), ``value_by_index``
the per-item values keyed by the item's row position as a string, ``extra`` any other
top-level keys the reference format has (an MIA's ``forget``/``holdout``/``auc``), and
``reason`` says why a value is NaN or None, so no NaN is ever silent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    agg_value: Any = None
    value_by_index: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.value_by_index is not None:
            self.value_by_index = {str(k): v for k, v in self.value_by_index.items()}
        if self.reason is None and isinstance(self.agg_value, float) and math.isnan(self.agg_value):
            self.reason = "NaN (no reason given by the metric)"

    def to_dict(self) -> dict[str, Any]:
        """The reference's per-metric shape (extra keys first, as open-unlearning orders MIAs)."""
        out: dict[str, Any] = dict(self.extra)
        out["agg_value"] = self.agg_value
        if self.value_by_index is not None:
            out["value_by_index"] = self.value_by_index
        if self.reason:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Result":
        d = dict(d)
        agg = d.pop("agg_value", None)
        vbi = d.pop("value_by_index", None)
        reason = d.pop("reason", None)
        return cls(agg_value=agg, value_by_index=vbi, extra=d, reason=reason)

    @classmethod
    def nan(cls, reason: str, **extra: Any) -> "Result":
        return cls(agg_value=float("nan"), reason=reason, extra=extra)
