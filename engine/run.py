"""Running a graph: cached nodes load, the rest run in dependency order, in stages.

Each round takes every node whose parents are done. Ready scorers are driven together:
each yields its requests, the executor serves all of them at once (so batches span
metrics and benchmarks), and each scorer gets its results back, for as many rounds as
it asks. Ready aggregators run on the CPU, in parallel through joblib when ``n_jobs``
allows. Every finished node is written to the store at once, under a per-node file
lock, so a killed run resumes and two processes never compute one node twice.

A node that raises is recorded with a short traceback; its descendants are skipped
with that reason; everything else still runs and is stored.
"""

from __future__ import annotations

import inspect
import os
import time
import traceback
import warnings
from collections import defaultdict
from typing import Any, Iterable, Mapping

from .cache import Cache, CacheWriteError, LeftAloneWarning
from .executor import Executor
from .graph import Graph, Vertex
from .planner import Plan, plan
from .requests import Request
from .resources import ResourceSet
from .results import NodeRecord, RunResult
from .results import provenance as provenance_of

# Heavy import: joblib (only with -j), inside the function that needs it.


def run(
    nodes: Graph | Iterable[Any],
    resources: Mapping[str, Any] | ResourceSet | None = None,
    *,
    cache: Cache | str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    executor: Executor | None = None,
    n_jobs: int = 1,
    progress: bool = False,
    force: bool = False,
    batch_tokens: int | None = None,
    provenance: dict | None = None,
    deterministic: bool = False,
    init_cache: bool = False,
    lock_timeout: float | None = None,
) -> RunResult:
    """Run ``nodes`` (a :class:`Graph` or configured metrics) with ``resources`` bound.

    ``cache`` is a :class:`Cache` or its folder (``cache_dir`` is the same, by its older
    name); None: ``$EVALDAG_CACHE_DIR`` or the user cache dir. The executor is built on
    ``cache.requests`` unless one is given. Returns a :class:`RunResult`; nothing raises
    for a failing metric (see its records), but graph errors (unknown parent, cycle,
    missing resource) raise before any work. ``provenance`` adds keys to run.json's
    provenance block. ``deterministic`` runs every model request alone, in a fixed order
    (values independent of batching; its results are cached apart from batched ones). A
    cache that cannot be written (full disk) stops the run with :class:`CacheWriteError`;
    what was stored before stays valid. A non-empty folder without the cache marker is
    refused (:class:`NotACache`) unless ``init_cache``; an empty or new one becomes a cache.
    A node whose lock another process holds is waited for (saying so after a few seconds);
    ``lock_timeout`` seconds end that wait with :class:`LockTimeout`, what was computed stored.
    """
    t0 = time.perf_counter()
    if cache is not None and cache_dir is not None:
        raise TypeError("run(): pass cache= or cache_dir=, not both")
    graph = nodes if isinstance(nodes, Graph) else Graph(nodes)
    rs = resources if isinstance(resources, ResourceSet) else ResourceSet(resources)
    served = plan(graph, rs)  # PlanError before anything is written, loaded or sent
    cache = Cache.open(cache if cache is not None else cache_dir)
    cache.claim(init=init_cache)  # a non-empty unmarked folder (~, the working directory) is never adopted
    cache.sweep()
    with cache.filehash.active():  # model files are hashed through this cache's memo
        graph.fingerprint(rs, execution="deterministic" if deterministic else None)
        if cache.read_only:  # refuse up front, naming the nodes, rather than fail node by node
            cache.check_writable([v.label for v in graph.order() if force or not cache.nodes.has(v.fingerprint)])
        executor = executor or Executor(cache=cache.requests, progress=progress, batch_tokens=batch_tokens,
                                        deterministic=deterministic)
        runner = _Runner(graph, rs, cache, executor, n_jobs, force)
        runner.lock_timeout, runner.plan = lock_timeout, served
        try:
            runner.go()
        finally:
            if cache.left_alone():  # newer-format or unreadable entries: said once, never overwritten
                warnings.warn(cache.left_alone(), LeftAloneWarning, stacklevel=2)
        for key, backends in served.labels.items():  # run.json: which backend served each scorer
            if key in runner.records:
                runner.records[key].backend = backends
        execution = {"deterministic": deterministic or bool(getattr(executor, "deterministic", False)),
                     "batch_tokens": getattr(executor, "batch_tokens", batch_tokens)}
        prov = provenance_of(rs, graph, {"execution": execution, **(provenance or {})})
    return RunResult(
        graph=graph,
        cache=cache,
        records=runner.records,
        loaded=runner.values,
        executor=executor.stats.summary(),
        wall_seconds=time.perf_counter() - t0,
        provenance=prov,
    )


class _Runner:
    def __init__(self, graph: Graph, rs: ResourceSet, cache: Cache, executor: Executor, n_jobs: int, force: bool):
        self.g, self.rs, self.ex = graph, rs, executor
        self.store, self.history = cache.nodes, cache.history
        self.n_jobs, self.force = n_jobs, force
        self.lock_timeout: float | None = None  # --lock-timeout: how long to wait for another process's node
        self.records: dict[str, NodeRecord] = {}
        self.values: dict[str, Any] = {}
        self.slots = _slots(graph)
        self.plan = Plan()  # which backend serves each scorer vertex (planner.py)

    # ------------------------------------------------------------------ main loop
    def go(self) -> None:
        pending = self._drop_done(self.g.order())
        while pending:
            before = len(self.records)
            ready, rest = [], []
            for v in pending:
                states = [self.records.get(pk) for pk in v.parent_keys.values()]
                bad = [s for s in states if s is not None and s.status in ("failed", "skipped")]
                if bad:
                    self.records[v.key] = NodeRecord.skipped(v, f"skipped: parent {bad[0].name} {bad[0].status}", self.reason(v))
                elif all(s is not None for s in states):
                    ready.append(v)
                else:
                    rest.append(v)
            if ready:
                self._stage(ready)
            elif len(self.records) == before:  # pragma: no cover - impossible in a DAG
                raise RuntimeError("scheduler made no progress: " + ", ".join(v.label for v in rest))
            pending = [v for v in rest if v.key not in self.records]

    def _stage(self, ready: list[Vertex]) -> None:
        """Run ready nodes whose locks we get; then wait for the ones another process holds."""
        mine, theirs = [], []
        locks = {}
        for v in ready:
            lk = self.store.try_lock(v.fingerprint)
            (mine if lk else theirs).append(v)
            if lk:
                locks[v.key] = lk
        try:
            mine = self._drop_done(mine)
            self._compute(mine)
        finally:
            for lk in locks.values():
                lk.release()
        for v in theirs:  # another process computes it: wait, saying for whom after a few seconds
            with self.store.wait_lock(v.fingerprint, v.label, self.lock_timeout):
                if not self._drop_done([v]):
                    continue
                self._compute([v])

    def _drop_done(self, vs: list[Vertex]) -> list[Vertex]:
        """Nodes already in the store (verified by checksum on read) count as cached."""
        out = []
        for v in vs:
            entry = None if self.force else self.store.get(v.fingerprint, v.metric.name)
            if entry is not None:
                self.values[v.key] = entry.value
                self.records[v.key] = NodeRecord.cached(v)
            else:
                out.append(v)
        return out

    def _compute(self, vs: list[Vertex]) -> None:
        by_fp: dict[str, list[Vertex]] = defaultdict(list)
        for v in vs:
            by_fp[v.fingerprint].append(v)  # identical work under two vertices runs once
        firsts = [group[0] for group in by_fp.values()]
        self._run_scorers([v for v in firsts if v.metric.scorer])
        self._run_aggregators([v for v in firsts if not v.metric.scorer])
        for group in by_fp.values():
            head = self.records[group[0].key]
            for twin in group[1:]:
                self.records[twin.key] = NodeRecord.twin(twin, head)
                if group[0].key in self.values:
                    self.values[twin.key] = self.values[group[0].key]

    # ------------------------------------------------------------------ inputs and outputs
    def value(self, key: str) -> Any:
        if key not in self.values:
            v = self.g.vertices[key]
            entry = self.store.get(v.fingerprint, v.metric.name)
            if entry is None:
                raise RuntimeError(f"cache entry for {v.label} vanished or was corrupt; rerun to recompute it")
            self.values[key] = entry.value
        return self.values[key]

    def inputs(self, v: Vertex) -> dict[str, Any]:
        kw = {k: self.value(pk) for k, pk in v.parent_keys.items()}
        for need, name in v.resources.items():
            kw[need] = self.rs.get(name, v.label).value()
        if "params" in inspect.signature(v.metric.fn).parameters:
            kw["params"] = v.node.params
        return kw

    def finish(self, v: Vertex, value: Any, seconds: float) -> None:
        reason = self.reason(v)
        meta = {"node": v.label, "metric": v.metric.name, "components": v.components, "seconds": seconds}
        if v.key in self.plan.labels:  # `cache explain` names the backend that served it
            meta["backend"] = self.plan.labels[v.key]
        self.store.put(v.fingerprint, value, meta)
        self.history.remember(self.slots[v.key], v.components)
        self.values[v.key] = value
        self.records[v.key] = NodeRecord.computed(v, seconds, reason)

    def fail(self, v: Vertex, err: BaseException | str, seconds: float) -> None:
        if isinstance(err, CacheWriteError):  # not the node's fault: stop the run, one clear line
            raise err
        tb = err if isinstance(err, str) else "".join(traceback.format_exception(type(err), err, err.__traceback__, limit=-4))
        self.records[v.key] = NodeRecord.failed(v, seconds, tb, self.reason(v))

    def reason(self, v: Vertex) -> str:
        if v.fingerprint in self.store.corrupt:
            return "corrupt-entry"
        old = self.history.last(self.slots[v.key])
        new = v.components or {}
        if old is None:
            return "new"
        if old.get("version") != new.get("version"):
            return "version"
        if old.get("code") != new.get("code"):
            return "code"
        if old.get("params") != new.get("params"):
            return "params"
        changed = [k for k, fp in new.get("resources", {}).items() if old.get("resources", {}).get(k) != fp]
        if changed:
            kinds = {self.rs.get(v.resources[k]).kind for k in changed}
            return "model" if "model" in kinds else "data"
        if old.get("parents") != new.get("parents"):
            return "parent"
        return "new"

    # ------------------------------------------------------------------ aggregators
    def _run_aggregators(self, vs: list[Vertex]) -> None:
        jobs = []
        for v in vs:
            try:
                jobs.append((v, self.inputs(v)))
            except Exception as e:  # a parent entry vanished, a resource failed to load
                self.fail(v, e, 0.0)
        if self.n_jobs != 1 and len(jobs) > 1:
            from joblib import Parallel, delayed

            # results arrive as they finish, so each is stored at once (a kill loses little)
            outs = Parallel(n_jobs=self.n_jobs, return_as="generator")(delayed(_call)(v.metric.fn, kw) for v, kw in jobs)
        else:
            outs = (_call(v.metric.fn, kw) for v, kw in jobs)
        for (v, _), (ok, value, seconds) in zip(jobs, outs):
            if ok:
                self.finish(v, value, seconds)
            else:
                self.fail(v, value, seconds)

    # ------------------------------------------------------------------ scorers
    def _run_scorers(self, vs: list[Vertex]) -> None:
        active: dict[str, tuple[Vertex, Any, list, float]] = {}
        started: dict[str, float] = {}
        for v in vs:
            started[v.key] = time.perf_counter()
            try:
                gen = v.metric.fn(**self.inputs(v))
                self._advance(v, gen, None, active, started)
            except Exception as e:
                self.fail(v, e, time.perf_counter() - started[v.key])
        while active:
            by_model: dict[str, list[tuple[str, int, Any, Request]]] = defaultdict(list)
            for key, (v, gen, reqs, _) in active.items():
                for i, (res_name, req) in enumerate(reqs):
                    run_name = v.bind.get(res_name, res_name)
                    model = self.plan.resource(v, run_name, self.rs.get(run_name, v.label).value())
                    by_model[model.fingerprint()].append((key, i, model, req))
            answers: dict[str, list] = {key: [None] * len(active[key][2]) for key in active}
            failed: dict[str, BaseException] = {}
            for items in by_model.values():
                try:
                    results = self.ex.serve([(m, r) for _, _, m, r in items])
                except Exception as e:
                    for key, *_ in items:
                        failed[key] = e
                    continue
                for (key, i, _, _), res in zip(items, results):
                    answers[key][i] = res
            for key in list(active):
                v, gen, _, _ = active.pop(key)
                if key in failed:
                    self.fail(v, failed[key], time.perf_counter() - started[key])
                    continue
                try:
                    self._advance(v, gen, answers[key], active, started)
                except Exception as e:
                    self.fail(v, e, time.perf_counter() - started[key])

    def _advance(self, v: Vertex, gen: Any, answer: list | None, active: dict, started: dict) -> None:
        try:
            out = next(gen) if answer is None else gen.send(answer)
        except StopIteration as stop:
            self.finish(v, stop.value, time.perf_counter() - started[v.key])
            return
        reqs = [_route(x, v) for x in out]
        active[v.key] = (v, gen, reqs, started[v.key])


def _route(item: Any, v: Vertex) -> tuple[str, Request]:
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


def _call(fn: Any, kwargs: dict) -> tuple[bool, Any, float]:
    t = time.perf_counter()
    try:
        return True, fn(**kwargs), time.perf_counter() - t
    except Exception as e:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-4))
        return False, tb, time.perf_counter() - t


def _slots(graph: Graph) -> dict[str, str]:
    """A stable place name per vertex (display name, or child slot + access key) for history."""
    slots: dict[str, str] = {}
    for v in reversed(graph.order()):
        if v.names:
            g, n = v.names[0]
            slots[v.key] = f"{g}/{n}" if g else n
            continue
        for child in sorted(graph.nx.successors(v.key), key=lambda c: slots.get(c, "")):
            keys = graph.nx.edges[v.key, child]["keys"]
            slots[v.key] = f"{slots[child]}.{keys[0]}"
            break
        else:
            slots[v.key] = v.label
    return slots
