"""Running a graph: cached nodes load, the rest run in dependency order, in stages.

Each round takes every node whose parents are done. Ready scorers are driven together:
each yields its requests, the executor serves all of them at once (batches span metrics
and benchmarks), and each scorer gets its results back, for as many rounds as it asks. Ready aggregators run on the CPU, in parallel through joblib when ``n_jobs``
allows. Every finished node is written to the store at once, under a per-node file
lock, so a killed run resumes and two processes never compute one node twice.

A node that raises is recorded with a short traceback (its one line alone for an ``InputError`` or a
``one_line`` error: a backend's ServingError); its descendants are skipped; everything else still runs.
"""

from __future__ import annotations

import inspect
import os
import time
import traceback
import warnings
from collections import defaultdict
from typing import Any, Iterable, Mapping

import networkx as nx

from .adapters.integrity import ModelChangedError, ModelRefused
from .cache import Cache, CacheWriteError, LeftAloneWarning
from .executor import Executor
from .declare import InputError
from .graph import Graph, Vertex
from .planner import Plan, plan
from .sameweights import prove
from .progress import StageLines, bar as progress_bar
from .reasons import history_slots, recompute_reason, remember
from .resources import ResourceSet
from .results import NodeRecord, RunResult, flagged
from .scorers import run_scorers
from .results import provenance as provenance_of

# Heavy import: joblib (only with -j), inside the function that needs it.


def run(nodes: Graph | Iterable[Any], resources: Mapping[str, Any] | ResourceSet | None = None, *,
        cache: Cache | str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
        executor: Executor | None = None, n_jobs: int = 1, progress: bool | None = None, force: bool = False,
        batch_tokens: int | None = None, provenance: dict | None = None, deterministic: bool | None = None,
        init_cache: bool = False, lock_timeout: float | None = None, prefix_sharing: bool | None = None) -> RunResult:
    """Run ``nodes`` (a :class:`Graph` or configured metrics) with ``resources`` bound.

    ``cache`` is a :class:`Cache` or its folder (``cache_dir`` is the same, by its older
    name); None: ``$EVALDAG_CACHE_DIR`` or the user cache dir. The executor is built on
    ``cache.requests`` from ``progress``, ``batch_tokens`` and ``deterministic``; an
    ``executor`` given carries its own, so a different value beside it is a
    ``TypeError`` (never silently ignored). Returns a :class:`RunResult`; nothing raises
    for a failing metric (see its records), but graph errors (unknown parent, cycle,
    missing resource) raise before any work. ``provenance`` adds keys to run.json's
    provenance block. ``deterministic`` runs every model request alone, in a fixed order
    (values independent of batching; its results are cached apart from batched ones).
    ``prefix_sharing`` (default on, never under ``deterministic``): requests sharing a context
    (a question's answers) are batched together and the context computed once where the backend
    can (docs/performance.md: the numbers move by float32 rounding). A
    cache that cannot be written (full disk) stops the run with :class:`CacheWriteError`;
    what was stored before stays valid. A non-empty folder without the cache marker is
    refused (:class:`NotACache`) unless ``init_cache``; an empty or new one becomes a cache.
    A node whose lock another process holds is waited for (saying so after a few seconds);
    ``lock_timeout`` seconds end that wait with :class:`LockTimeout`, what was computed stored.
    """
    t0 = time.perf_counter()
    if cache is not None and cache_dir is not None:
        raise TypeError("run(): pass cache= or cache_dir=, not both")
    settings = _executor_settings(executor, progress=progress, batch_tokens=batch_tokens, deterministic=deterministic,
                                  prefix_sharing=prefix_sharing)
    graph = nodes if isinstance(nodes, Graph) else Graph(nodes)
    rs = resources if isinstance(resources, ResourceSet) else ResourceSet(resources)
    served = plan(graph, rs)  # PlanError before anything is written, loaded or sent
    cache = Cache.open(cache if cache is not None else cache_dir)
    cache.claim(init=init_cache)  # a non-empty unmarked folder (~, the working directory) is never adopted
    return execute(graph, rs, cache, executor or Executor(cache=cache.requests, **settings), served,
                   settings=settings, n_jobs=n_jobs, force=force, lock_timeout=lock_timeout,
                   provenance=provenance, started=t0)


def execute(graph: Graph, rs: ResourceSet, cache: Cache, executor: Executor, served: Plan, *,
            settings: dict[str, Any], n_jobs: int = 1, force: bool = False, lock_timeout: float | None = None,
            provenance: dict | None = None, started: float | None = None, fingerprinted: bool = False) -> RunResult:
    """:func:`run`'s body, for a caller that planned (``served``), claimed ``cache`` and built ``executor``
    itself (``session.py``), each once; ``fingerprinted``: set already (a rank's, in ``prepare``)."""
    t0 = time.perf_counter() if started is None else started
    deterministic = settings["deterministic"]
    cache.sweep()
    # model files are hashed through this cache's memo; a derived model that trains stores its weights in it
    with cache.filehash.active(), cache.weights.active():
        if not fingerprinted:
            graph.fingerprint(rs, execution="deterministic" if deterministic else None, served=served)
        if cache.read_only:  # refuse up front, naming the nodes, rather than fail node by node
            cache.check_writable([v.label for v in graph.order() if force or not cache.nodes.has(v.fingerprint)])
        runner = _Runner(graph, rs, cache, executor, n_jobs, force)
        runner.lock_timeout, runner.plan = lock_timeout, served
        proofs = prove(graph, served, rs, executor.serve, runner.inputs)  # FallbackMismatch before any node
        try:
            runner.go()
        finally:
            if cache.left_alone():  # newer-format or unreadable entries: said once, never overwritten
                warnings.warn(cache.left_alone(), LeftAloneWarning, stacklevel=3)
        for key, backends in served.labels.items():  # run.json: which backend served each scorer
            if key in runner.records:
                runner.records[key].backend = backends
        execution = {"deterministic": deterministic, "batch_tokens": settings["batch_tokens"],
                     "prefix_sharing": bool(settings.get("prefix_sharing", True)) and not deterministic}
        prov = provenance_of(rs, graph, {"execution": execution, **({"fallback_proof": proofs} if proofs else {}), **(provenance or {})})
    return RunResult(graph=graph, cache=cache, records=runner.records, loaded=runner.values,
                     executor=executor.stats.summary(), wall_seconds=time.perf_counter() - t0, provenance=prov,
                     lock_wait_seconds=runner.lock_wait_seconds, routed=sorted(proofs))


def _executor_settings(executor: Executor | None, **given: Any) -> dict[str, Any]:
    """The executor's settings: those given (defaulted), or the executor's own when one is
    passed, refusing a given value that differs from it (one way in, no silent drop)."""
    defaults = {"progress": False, "batch_tokens": None, "deterministic": False, "prefix_sharing": True}
    if executor is None:
        return {k: defaults[k] if v is None else v for k, v in given.items()}
    own = {k: getattr(executor, k, defaults[k]) for k in given}
    for k, v in given.items():
        if v is not None and v != own[k]:
            raise TypeError(f"run(): {k}={v!r} contradicts the executor given (its {k} is {own[k]!r});"
                            f" set it on the executor (Executor({k}=...)) or leave it out of run()")
    return {"progress": bool(own["progress"]), "batch_tokens": own["batch_tokens"], "deterministic": bool(own["deterministic"]),
            "prefix_sharing": bool(own.get("prefix_sharing", True))}


class _Runner:
    def __init__(self, graph: Graph, rs: ResourceSet, cache: Cache, executor: Executor, n_jobs: int, force: bool):
        self.g, self.rs, self.ex = graph, rs, executor
        self.store, self.history = cache.nodes, cache.history
        self.n_jobs, self.force = n_jobs, force
        self.lock_timeout: float | None = None  # --lock-timeout: how long to wait for another process's node
        self.lock_wait_seconds = 0.0  # of the run's time, waiting for other processes' nodes
        self.held: dict[str, Any] = {}  # vertex key -> its node lock, released the moment the node is done
        self.records: dict[str, NodeRecord] = {}
        self.values: dict[str, Any] = {}
        self.slots = history_slots(graph)
        self.flags: dict[str, str] = {}  # vertex key -> the non-finite-logits note it carries
        self.plan = Plan()  # which backend serves each scorer vertex (planner.py)

    # ------------------------------------------------------------------ main loop
    def go(self) -> None:
        """Run the graph in stages: a stage is every node whose parents are all done.

        Each node keeps a count of its parents still running and is looked at when the
        last one finishes (or at once when one fails: it is skipped), so scheduling is
        linear in the graph's size; rescanning everything pending after each stage was
        quadratic on a long chain (10,000 nodes, 10,000 stages).
        """
        pending = self._drop_done(self.g.order())
        pos = {v.key: i for i, v in enumerate(pending)}
        left = {v.key: len(set(v.parent_keys.values()) - self.records.keys()) for v in pending}
        frontier = [v for v in pending if left[v.key] == 0]
        queued = {v.key for v in frontier}
        stages = StageLines(pending, self.g.nx, getattr(self.ex, "progress", False))
        while frontier:
            ready, i = [], 0
            while i < len(frontier):  # grows: the children of a node skipped here are skipped in this pass
                v = frontier[i]
                i += 1
                states = [self.records.get(pk) for pk in v.parent_keys.values()]
                bad = [s for s in states if s is not None and s.status in ("failed", "skipped")]
                if bad:
                    self.records[v.key] = NodeRecord.skipped(v, f"skipped: parent {bad[0].name} {bad[0].status}", self.reason(v))
                    frontier += self._release(v, left, queued)
                else:
                    ready.append(v)
            if ready:
                stages.say(ready)
                self._stage(ready)
            frontier = sorted((c for v in ready for c in self._release(v, left, queued)), key=lambda c: pos[c.key])
        stuck = [v.label for v in pending if v.key not in self.records]
        if stuck:  # pragma: no cover - impossible in a DAG
            raise RuntimeError("scheduler made no progress: " + ", ".join(stuck[:10]))

    def _release(self, v: Vertex, left: dict, queued: set) -> list[Vertex]:
        """Children of ``v`` that are now due: their last parent is done, or ``v`` failed."""
        out = []
        failed = self.records[v.key].status in ("failed", "skipped") if v.key in self.records else False
        for c in self.g.nx.successors(v.key):
            if c not in left or c in queued:
                continue
            left[c] -= 1
            if left[c] == 0 or failed:
                queued.add(c)
                out.append(self.g.vertices[c])
        return out

    def _stage(self, ready: list[Vertex]) -> None:
        """Run ready nodes whose locks we get; then wait for the ones another process holds."""
        mine, theirs = [], []
        for v in ready:
            lk = self.store.try_lock(v.fingerprint, doing=self._doing(v))
            (mine if lk else theirs).append(v)
            if lk:
                self.held[v.key] = lk
        try:
            mine = self._drop_done(mine)
            self._compute(mine)
        finally:  # the locks finish() and fail() have not released yet (cached nodes, twins)
            while self.held:
                self.held.popitem()[1].release()
        for v in theirs:  # another process computes it: wait, saying for whom after a few seconds
            t0 = time.perf_counter()
            with self.store.wait_lock(v.fingerprint, v.label, self.lock_timeout):
                self.lock_wait_seconds += time.perf_counter() - t0
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
                self.records[v.key] = NodeRecord.cached(v, entry.meta)
                self._note(v.key, entry.meta)
            else:
                out.append(v)
        return out

    def _compute(self, vs: list[Vertex]) -> None:
        by_fp: dict[str, list[Vertex]] = defaultdict(list)
        for v in vs:
            by_fp[v.fingerprint].append(v)  # identical work under two vertices runs once
        firsts = [group[0] for group in by_fp.values()]
        run_scorers(self, [v for v in firsts if v.metric.scorer])
        self._run_aggregators([v for v in firsts if not v.metric.scorer])
        for group in by_fp.values():
            head = self.records[group[0].key]
            for twin in group[1:]:
                self.records[twin.key] = NodeRecord.twin(twin, head)
                if group[0].key in self.values:
                    self.values[twin.key] = self.values[group[0].key]
                if group[0].key in self.flags:
                    self.flags[twin.key] = self.flags[group[0].key]

    # ------------------------------------------------------------------ inputs and outputs
    def value(self, key: str) -> Any:
        if key not in self.values:
            v = self.g.vertices[key]
            entry = self.store.get(v.fingerprint, v.metric.name)
            if entry is None:
                raise RuntimeError(f"cache entry for {v.label} vanished or was corrupt; rerun to recompute it")
            self.values[key] = entry.value
            self._note(key, entry.meta)
        return self.values[key]

    def inputs(self, v: Vertex) -> dict[str, Any]:
        kw = {k: self.value(pk) for k, pk in v.parent_keys.items()}
        for need, name in v.resources.items():
            kw[need] = self.rs.get(name, v.label).value()
        if "params" in inspect.signature(v.metric.fn).parameters:
            kw["params"] = v.node.params
        return kw

    def _note(self, key: str, meta: dict) -> None:
        if isinstance(meta.get("nonfinite"), str):
            self.flags[key] = meta["nonfinite"]

    def finish(self, v: Vertex, value: Any, seconds: float) -> None:
        meta = {"node": v.label, "metric": v.metric.name, "components": v.components, "seconds": seconds,
                "reason": (reason := self.reason(v))}  # a later warm run's record says when, how long and why
        # downstream of a model with non-finite logits: the value says so, and so does every child's
        flag = self.flags.get(v.key) or next((self.flags[pk] for pk in v.parent_keys.values() if pk in self.flags), None)
        if flag:
            self.flags[v.key], meta["nonfinite"] = flag, flag
            value = flagged(value, flag)
        meta["reads"] = self.rs.described(v.resources)  # `cache explain` names the model and data, and
        if v.key in self.plan.labels:  # the backend that served it
            meta["backend"] = self.plan.labels[v.key]
        self.store.put(v.fingerprint, value, meta)
        self._unlock(v)  # stored: a process waiting for this node goes on now, not at the stage's end
        remember(self.history, self.slots[v.key], v.components)
        self.values[v.key] = value
        self.records[v.key] = NodeRecord.computed(v, seconds, reason)

    def _unlock(self, v: Vertex) -> None:
        if v.key in self.held:
            self.held.pop(v.key).release()

    def _doing(self, v: Vertex) -> str:
        """What a waiter is told this process computes: the node and the model it reads."""
        models = [d.get("path") or d.get("spec") for d in self.rs.described(v.resources).values() if d.get("kind") == "model"]
        return v.label + (f" on {', '.join(map(str, models))}" if models else "")

    def fail(self, v: Vertex, err: BaseException | str, seconds: float) -> None:
        self._unlock(v)
        if isinstance(err, ModelChangedError):  # nothing computed from the changed model stays stored
            self.forget_model(getattr(err, "model_fp", None))
        if isinstance(err, (CacheWriteError, ModelRefused)):  # not the node's fault: stop the run, one clear line
            raise err
        tb = err if isinstance(err, str) else str(err) if isinstance(err, InputError) or getattr(err, "one_line", False) else \
            "".join(traceback.format_exception(type(err), err, err.__traceback__, limit=-4))
        self.records[v.key] = NodeRecord.failed(v, seconds, tb, self.reason(v))

    def forget_model(self, fp: str | None) -> None:
        """Remove the nodes this run computed from model ``fp`` (directly or through parents)."""
        if fp is None:
            return
        readers = [v.key for v in self.g.order()
                   if any(getattr(self.rs.get(name).value(), "fingerprint", lambda: None)() == fp
                          for name in v.resources.values())]
        tainted = set(readers).union(*(nx.descendants(self.g.nx, k) for k in readers))
        for key in tainted:
            rec = self.records.get(key)
            if rec is not None and rec.status == "computed":
                getattr(self.store, "discard", lambda fp: None)(rec.fingerprint)

    def reason(self, v: Vertex) -> str:
        return recompute_reason(v, self.slots[v.key], self.store, self.history, self.rs)

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
        # a stage longer than a second gets a bar over its nodes (ROUGE alone can take seconds)
        bar = progress_bar(len(jobs), "evaldag aggregators", "nodes", getattr(self.ex, "progress", False), delay=1.0)
        try:
            for (v, _), (ok, value, seconds) in zip(jobs, outs):
                if ok:
                    self.finish(v, value, seconds)
                else:
                    self.fail(v, value, seconds)
                bar.update(1)
        finally:
            bar.close()


def _call(fn: Any, kwargs: dict) -> tuple[bool, Any, float]:
    t = time.perf_counter()
    try:
        return True, fn(**kwargs), time.perf_counter() - t
    except Exception as e:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-4))
        return False, tb, time.perf_counter() - t

