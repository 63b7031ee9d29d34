"""Turn a function that *calls* a model into a scorer that *yields* requests.

lm-evaluation-harness's ``simple_evaluate`` drives the model itself: it calls
``lm.loglikelihood(all requests)`` and waits for the answers, then filters, scores and
aggregates. An evaldag scorer is the other way round: it yields requests and the run's
executor answers all ready scorers' requests together. :func:`bridged` runs the
function in a worker thread whose ``serve(requests)`` hands each batch to the scorer's
generator and blocks until the executor's answers come back, so lm-evaluation-harness
keeps its whole pipeline (few-shot, filters, metrics, groups) and evaldag keeps its
batching, deduplication and cache. Only one of the two threads runs at a time.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Generator


class Cancelled(BaseException):
    """Raised inside the worker when the scorer is abandoned (its generator closed)."""


def bridged(fn: Callable[[Callable[[list], list]], Any]) -> Generator[list, list, Any]:
    """A scorer body: ``fn(serve)`` in a thread; each ``serve(reqs)`` becomes one ``yield reqs``."""
    to_scorer: queue.Queue = queue.Queue()
    to_worker: queue.Queue = queue.Queue()

    def serve(reqs: list) -> list:
        if not reqs:
            return []
        to_scorer.put(("ask", list(reqs)))
        kind, value = to_worker.get()
        if kind == "stop":
            raise Cancelled()
        return value

    def work() -> None:
        try:
            to_scorer.put(("done", fn(serve)))
        except Cancelled:
            pass
        except BaseException as e:  # handed to the scorer, which raises it in the run's thread
            to_scorer.put(("error", e))

    worker = threading.Thread(target=work, name="evaldag-lmeval", daemon=True)
    worker.start()
    try:
        while True:
            kind, value = to_scorer.get()
            if kind == "ask":
                answers = yield value
                to_worker.put(("ok", answers))
            elif kind == "done":
                return value
            else:
                raise value
    finally:
        if worker.is_alive():
            to_worker.put(("stop", None))
