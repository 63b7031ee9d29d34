"""The ``grad_norm`` request kind: open-unlearning's GradNorm attack, as a value.

Registered with the engine's kind registry on import (so the request cache finds its
result type); its HF handler is ``grad_backend.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...engine.requests import Request, register_kind


@dataclass(frozen=True)
class GradNorm(Request):
    """Gradient norms of the mean NLL of the continuation (one backward pass per sample).

    ``exclude_last`` drops the last continuation token from the loss (open-unlearning's
    GradNorm attack excludes the trailing eos). The result is the mean over parameters
    of each parameter's ``||grad||_p`` (open-unlearning's definition, not a global norm).
    """

    context_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]
    p: float = 2.0
    exclude_last: bool = True
    kind: ClassVar[str] = "grad_norm"
    words: ClassVar[str] = "gradients"
    max_batch: ClassVar[int | None] = 1  # one backward per sample, unless the handler batches them
    cost_rank: ClassVar[int] = 2  # a backward pass per row: served after every forward-only kind
    padding_side: ClassVar[str] = "right"

    def length(self) -> int:
        return len(self.context_ids) + len(self.continuation_ids)


@dataclass
class GradNormResult:
    value: float

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"value": np.asarray([self.value], dtype=np.float64)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict) -> "GradNormResult":
        return cls(float(arrays["value"][0]))


register_kind(GradNorm, GradNormResult)
