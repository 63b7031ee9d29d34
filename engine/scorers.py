"""Driving a stage's scorers: each yields requests, the executor serves them, each gets its answers.

Rounds go cheapest first: the scorers whose pending requests are all of the cheapest kind
(``Request.cost_rank``: token statistics before generation before GradNorm's backward passes)
are served and advanced, for as many rounds as they ask, before any dearer work starts. So a
node that needs only token statistics is finished, stored and unlocked while a long
generation of the same stage is still to come: a stopped run has kept it, and another process
waiting for it waits for it alone. Scorers of one rank are still served together, so batches
span metrics and benchmarks as before.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Protocol

from .graph import Vertex
from .requests import Request, nonfinite_output
from .results import nonfinite_flag


class Runner(Protocol):  # what run.py's runner gives the scorers' loop
    ex: Any
    rs: Any
    plan: Any
    flags: dict[str, str]

    def inputs(self, v: Vertex) -> dict[str, Any]: ...
    def finish(self, v: Vertex, value: Any, seconds: float) -> None: ...
    def fail(self, v: Vertex, err: BaseException | str, seconds: float) -> None: ...


def run_scorers(runner: Runner, vs: list[Vertex]) -> None:
    """Start every scorer of ``vs``, then serve their requests in rounds, cheapest kinds first."""
    active: dict[str, tuple[Vertex, Any, list]] = {}
    started: dict[str, float] = {}
    for v in vs:
        started[v.key] = time.perf_counter()
        try:
            _advance(runner, v, v.metric.fn(**runner.inputs(v)), None, active, started)
        except Exception as e:
            runner.fail(v, e, time.perf_counter() - started[v.key])
    while active:
        rank = {key: max((type(r).cost_rank for _, r in reqs), default=0) for key, (_, _, reqs) in active.items()}
        cheapest = min(rank.values())
        answers, failed = _serve(runner, {k: active[k] for k in active if rank[k] == cheapest})
        for key in [k for k in active if rank[k] == cheapest]:
            v, gen, _ = active.pop(key)
            if key in failed:
                runner.fail(v, failed[key], time.perf_counter() - started[key])
                continue
            try:
                _advance(runner, v, gen, answers[key], active, started)
            except Exception as e:
                runner.fail(v, e, time.perf_counter() - started[key])


def _serve(runner: Runner, round_: dict[str, tuple[Vertex, Any, list]]) -> tuple[dict[str, list], dict[str, BaseException]]:
    """One round's requests through the executor, one call per model; answers in asked order."""
    by_model: dict[str, list[tuple[str, int, Any, Request]]] = defaultdict(list)
    for key, (v, _, reqs) in round_.items():
        for i, (res_name, req) in enumerate(reqs):
            run_name = v.bind.get(res_name, res_name)
            model = runner.plan.resource(v, run_name, runner.rs.get(run_name, v.label).value())
            by_model[model.fingerprint()].append((key, i, model, req))
    answers: dict[str, list] = {key: [None] * len(round_[key][2]) for key in round_}
    failed: dict[str, BaseException] = {}
    for items in by_model.values():
        try:
            results = runner.ex.serve([(m, r) for _, _, m, r in items])
        except Exception as e:
            for key, *_ in items:
                failed[key] = e
            continue
        for (key, i, model, _), res in zip(items, results):
            answers[key][i] = res
            if key not in runner.flags and nonfinite_output(res):
                runner.flags[key] = nonfinite_flag(getattr(model, "name", None) or model.fingerprint()[:12])
    return answers, failed


def _advance(runner: Runner, v: Vertex, gen: Any, answer: list | None, active: dict, started: dict) -> None:
    try:
        out = next(gen) if answer is None else gen.send(answer)
    except StopIteration as stop:
        runner.finish(v, stop.value, time.perf_counter() - started[v.key])
        return
    active[v.key] = (v, gen, [route(x, v) for x in out])


def route(item: Any, v: Vertex) -> tuple[str, Request]:
    """A yielded item is a Request (for ``model``) or ``(resource_name, Request)``."""
    if isinstance(item, Request):
        res = "model"
    elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Request):
        res, item = item
    else:
        raise TypeError(f"scorer {v.label} yielded {type(item).__name__}; expected Request or (resource, Request)")
    if res not in v.metric.needs:
        raise TypeError(f"scorer {v.label} sent a request to {res!r}, which it does not declare in needs")
    return res, item
