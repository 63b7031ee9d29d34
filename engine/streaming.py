"""Results handed back while a batch still runs: each finished sequence stored at once.

A generation stage on a real model is one continuous batch that runs for many minutes; if
its answers were stored only when the whole batch returns, a stop (SIGTERM, Ctrl-C, a
crash) would lose every one of them, and a progress bar counting finished batches would
not move. An adapter whose batch finishes row by row calls :func:`finished` for each row
as it completes; the executor, which set the sink around the batch, checks that answer,
stores it and moves the bar. An adapter that never calls it loses nothing: the executor
stores the whole batch when it returns, as before.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

_SINK: ContextVar[Callable[[int, Any], None] | None] = ContextVar("evaldag_finished_sink", default=None)


def finished(index: int, result: Any) -> None:
    """Row ``index`` of the batch being run is done with ``result`` (the value the batch will return)."""
    sink = _SINK.get()
    if sink is not None:
        sink(index, result)


@contextmanager
def sink(on_finished: Callable[[int, Any], None]) -> Iterator[None]:
    """Route :func:`finished` calls made while the block runs to ``on_finished``."""
    token = _SINK.set(on_finished)
    try:
        yield
    finally:
        _SINK.reset(token)
