"""The gradient-norm request kind and its HF handler (open-unlearning's GradNorm attack).

The kind belongs to the unlearning family (``mia_gradnorm``), so it lives here, not in
the engine: ``grad_request.py`` declares :class:`GradNorm` (``requests.register_kind``);
importing this module registers it and its handler on :class:`~evaldag.engine.adapters.hf.hf_adapter.HFAdapter`, with the
group budget that lets ghost norms take many rows in one backward (``hf_grad``,
``hf_ghost``). Per loaded model it keeps one :class:`~.hf_grad.GradNormRunner`;
:func:`configure` picks its way (``mode``) and rows per backward (``rows``).
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from typing import Any

from ...engine.adapters.hf.hf_adapter import GENERATE_GROUP, HFAdapter
from ...engine.batching import Budget
from ...engine.streaming import finished
from .grad_request import GradNorm, GradNormResult  # noqa: F401 - re-exported: the kind is registered there

# Rows per batched backward (ghost norms: 8 and 16 were equally fast on the 4 x 256 Llama
# on CPU, 32 slower), and the memory vmap's per-sample gradients may take.
GRAD_ROWS, GRAD_MEMORY_BYTES = 8, 2 << 30


@dataclass
class _Settings:
    mode: str = "auto"
    rows: int = GRAD_ROWS
    runner: Any = None


_STATE: "weakref.WeakKeyDictionary[HFAdapter, _Settings]" = weakref.WeakKeyDictionary()


def configure(adapter: HFAdapter, mode: str = "auto", rows: int = GRAD_ROWS) -> None:
    """How ``adapter`` serves GradNorm: ``mode`` (hf_grad.GRAD_MODES) and rows per batched
    backward (1: one backward per row, open-unlearning's way). Read at the next batch."""
    _STATE[adapter] = _Settings(mode, rows)


def runner(adapter: HFAdapter) -> Any:
    """The adapter's GradNorm runner (made on first use, from its settings)."""
    from .hf_grad import GradNormRunner

    s = _STATE.setdefault(adapter, _Settings())
    if s.runner is None or (s.runner.mode, s.runner.rows) != (s.mode, s.rows):
        size = sum(p.numel() * p.element_size() for p in adapter.model.parameters())
        s.runner = GradNormRunner(adapter.model, adapter.masked_id, s.mode, s.rows,
                                  vmap_rows=max(1, GRAD_MEMORY_BYTES // max(1, size)), split=adapter.head_split())
    return s.runner


def serve(adapter: HFAdapter, reqs: list[GradNorm]) -> list[GradNormResult]:
    """open-unlearning's GradNorm attack, in train mode (GradNormRunner picks ghost norms,
    vmap or one backward per row; all give the same norms within float rounding). Empty
    targets give NaN. Eval mode is restored."""
    run = runner(adapter)
    out = run(list(reqs), lambda i, v: finished(i, GradNormResult(v)))  # each row stored as it finishes
    adapter.record_tokens(sum(r.length() for r in reqs), run.padded_tokens)
    return [GradNormResult(v) for v in out]


def served(adapter: HFAdapter) -> dict | None:
    """run.json's account of the adapter's GradNorm rows: the way (ghost, vmap or one
    backward per row), and why rows took one backward each (never silent)."""
    s = _STATE.get(adapter)
    return s.runner.account() if s is not None and s.runner is not None else None


def group_budget(adapter: HFAdapter, budget: Budget) -> Budget:
    """Many rows (under the token budget) when they can share a backward; split by length there."""
    if runner(adapter).way() == "one_row":
        return budget
    return dataclasses.replace(budget, max_batch=max(budget.max_batch, GENERATE_GROUP * _STATE[adapter].rows))


HFAdapter.handlers.add("grad_norm", serve, group_budget=group_budget, served=served)
