"""Data-parallel serving: every rank runs the same graph, each forwards a share of the batches.

Every rank builds the same graph and, stage by stage, the same request list, so the
ranks agree on what to do without a coordinator. For each (model, request kind) group:

1. the ranks agree which requests are cached: a request counts as cached only if every
   rank found it (an element-wise minimum over a mask), so all ranks see one missing list;
2. the missing requests are packed into batches exactly as one process would pack them
   (same sort, same token budget, agreed as the minimum over ranks), and whole batches are
   dealt out longest first, each to the least loaded rank by padded tokens. Sharding whole
   batches keeps every batch identical to a single-process run, so the numbers are
   bit-identical: padding a row with other rows changes its float results in the last
   bits (about 1e-6), which a row-level split would show in EVAL.json. Generation is
   dealt out row by row instead (see ``_ROW_KINDS``);
3. each rank forwards its batches; rank 0 writes its own to the request cache as each
   finishes; then every rank's results travel to every rank as packed bytes (the cache's
   checksummed safetensors format, never pickle), and rank 0 writes the others'.

Nodes: each rank holds node values in memory; only rank 0 writes the node store, the
history and (in the CLI) the outputs. Which nodes count as cached is agreed once, before
the run, so a node rank 0 writes during the run cannot make another rank skip work.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..batching import Budget, padded_tokens
from ..cache import Cache, Entry, History, NodeStore
from ..cache.nodes import NoLock
from ..executor import Executor, ExecutorStats, KindStats
from ..planner import Plan, plan
from ..graph import Graph
from ..resources import ResourceSet
from .group import Group, partition
from .lockstep import Lockstep
from .wire import decode_entries, decode_results, encode_entries, encode_results

# Kinds dealt out row by row rather than batch by batch: the generation decode loop
# schedules rows itself (a finished row leaves, a waiting prompt joins), so a row's
# batch-mates are not fixed even in one process, and its tokens do not depend on them.
# Teacher-forced kinds are dealt out as whole batches: their floats do, in the last bits.
_ROW_KINDS = frozenset({"generate"})
_SHARED = ("sequences_forwarded", "tokens_real", "tokens_padded", "batches", "oom_retries")
# per rank: the work it did itself, its seconds in forward passes, and the one-token passes it
# made only to keep the other ranks company (weights sharded over the ranks: lockstep.py)
_RANK_FIELDS = (*_SHARED, "seconds", "filler_passes")


@dataclass
class ShardedStats(ExecutorStats):
    world: int = 1
    gather_seconds: float = 0.0  # this rank's time in result exchanges (waiting for the slowest rank included)
    # rank -> counters of the work that rank did itself
    by_rank: dict[int, dict[str, float]] = field(default_factory=dict)

    def add_rank(self, rank: int, counts: dict[str, float]) -> None:
        row = self.by_rank.setdefault(rank, {k: 0 for k in _RANK_FIELDS})
        for k, v in counts.items():
            row[k] += v

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["world_size"] = self.world
        out["gather_seconds"] = self.gather_seconds
        out["by_rank"] = {str(r): dict(self.by_rank.get(r, {k: 0 for k in _RANK_FIELDS}))
                          for r in range(self.world)}
        return out


def cache_reads() -> str:
    """Who reads the cache: every rank ("all"), or rank 0 alone, which sends what it found to
    the others ("rank0": a cache on a network file system, where SQLite's WAL cannot be shared
    across machines, or on rank 0's local disk); see docs/scaling-out.md."""
    mode = os.environ.get("EVALDAG_DIST_CACHE_READS", "all")
    if mode not in ("all", "rank0"):
        raise ValueError(f"EVALDAG_DIST_CACHE_READS must be 'all' or 'rank0', not {mode!r}")
    return mode


class ReadOnlyRequests:
    """The request cache as a rank other than 0 sees it: it reads, rank 0 writes."""

    def __init__(self, cache: Any):
        self._cache = cache

    def get_many(self, model_fp: str, keys: Iterable[str]) -> dict[str, object]:
        return self._cache.get_many(model_fp, keys)

    def put_many(self, model_fp: str, items: Iterable[tuple[str, str, object]], meta: dict | None = None) -> None:
        pass


class ShardedExecutor(Executor):
    """An :class:`Executor` whose forward passes are spread over the ranks of ``group``."""

    def __init__(self, group: Group, cache: Any = None, **kw: Any):
        if not group.is_writer:
            kw["progress"] = False  # one progress bar, rank 0's
        super().__init__(cache=cache, **kw)
        self.group = group
        self.reads = cache_reads()
        self._by_row = False
        self._load = [0] * group.world  # padded tokens dealt to each rank so far (the same on every rank)
        self.stats = ShardedStats(world=group.world)
        for r in range(group.world):
            self.stats.add_rank(r, {})

    def _lookup(self, fp: str, kind: str, keys: list[str]) -> dict[str, Any]:
        differ = self.group.same("\n".join(keys), "the request-list check")
        if differ:
            raise RuntimeError(f"ranks {differ} asked model {fp[:12]} for other requests than rank 0 did: "
                               f"the ranks' graphs diverged (nondeterministic data or metric code?)")
        if self.reads == "rank0":  # only rank 0 opens the request cache; it sends what it found
            found = super()._lookup(fp, kind, keys) if self.group.is_writer else {}
            blob = self.group.broadcast_bytes(encode_results(kind, found, None, {}), "sending cached results")
            return found if self.group.is_writer else decode_results(kind, blob, where="rank 0")[1]
        found = super()._lookup(fp, kind, keys)
        agreed = self.group.min_ints([k in found for k in keys], "the cache lookup")
        return {k: found[k] for k, ok in zip(keys, agreed) if ok}

    def _budget(self, adapter: Any, fp: str, kind: str) -> Budget:
        own = super()._budget(adapter, fp, kind)
        tokens, max_batch = self.group.min_ints([own.tokens, own.max_batch], "the batch-budget agreement")
        self._budgets[(fp, kind)] = Budget(tokens, max_batch)
        return self._budgets[(fp, kind)]

    def _share(self, batches: list[list], length: Callable) -> list[list]:
        if self._by_row:
            return batches
        owners = partition([padded_tokens(b, length) for b in batches], self.group.world, self._load)
        return [b for b, r in zip(batches, owners) if r == self.group.rank]

    def _compute(self, model: Any, fp: str, kind: str, items: list, st: KindStats) -> dict:
        err: BaseException | None = None
        adapter = None
        try:
            adapter = self.adapter(model, fp)
        except Exception as e:
            err = e
        self.group.raise_if_any(err, f"loading model {fp[:12]}")
        # weights split over the ranks (FSDP, ZeRO-3: lockstep.py): every forward pass is paired
        pair = Lockstep(self.group, *adapter.lockstep()) if getattr(model, "sharded", None) else None
        self._by_row = kind in _ROW_KINDS
        if self._by_row:  # deal out rows; each rank packs its own
            owners = partition([x[1].length() for x in items], self.group.world, self._load)
            items = [x for x, r in zip(items, owners) if r == self.group.rank]
        before = {k: getattr(st, k) for k in _SHARED}
        t0 = time.perf_counter()
        mine: dict[str, Any] = {}
        try:
            with pair.serving() if pair is not None else contextlib.nullcontext():
                mine = super()._compute(model, fp, kind, items, st)
        except Exception as e:  # still take part in the exchange, so no rank waits forever
            err = e
        counts = {k: getattr(st, k) - before[k] for k in _SHARED}
        counts["seconds"] = time.perf_counter() - t0
        counts["filler_passes"] = pair.fillers if pair is not None else 0
        return self._exchange(fp, kind, mine, err, counts, st)

    def _exchange(self, fp: str, kind: str, mine: dict, err: BaseException | None, counts: dict, st: KindStats) -> dict:
        t0 = time.perf_counter()
        blobs = self.group.gather_bytes(encode_results(kind, mine, err, counts), f"the exchange of {kind} results")
        results: dict[str, Any] = dict(mine)
        others: list[tuple[str, str, Any]] = []
        errors = []
        own = {"counts": counts, "error": None if err is None else f"{type(err).__name__}: {err}"}
        for r, blob in enumerate(blobs):
            header, got = decode_results(kind, blob, where=f"rank {r}") if r != self.group.rank else (own, {})
            self.stats.add_rank(r, header["counts"])
            if header.get("error"):
                errors.append(f"rank {r}: {header['error']}")
            if r == self.group.rank:
                continue
            for k in _SHARED:
                setattr(st, k, getattr(st, k) + int(header["counts"][k]))
            self.stats.by_model[fp][kind] += int(header["counts"]["sequences_forwarded"])
            results.update(got)
            others.extend((key, kind, res) for key, res in got.items())
        if self.cache is not None and others:
            self.cache.put_many(self._store_keys[fp], others)  # rank 0 only; the others hold a read-only view
        self.stats.gather_seconds += time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"{kind} requests failed on " + "; ".join(errors))
        return results


class RankStore:
    """The node store as one rank sees it for one run: the agreed cached entries, plus
    what this run computed. Only the writer (rank 0) writes through to disk."""

    def __init__(self, store: NodeStore, entries: dict[str, Entry], writer: bool):
        self.store, self.root, self.writer = store, store.root, writer
        self.corrupt = store.corrupt
        self._entries = dict(entries)

    def get(self, fp: str, metric: str | None = None) -> Entry | None:
        return self._entries.get(fp)  # checked (fingerprint, metric, type) when read from disk in prepare()

    def put(self, fp: str, value: Any, meta: dict) -> None:
        if self.writer:
            self.store.put(fp, value, meta)
        self._entries[fp] = Entry(fp, value, meta)

    # node locks guard against other processes computing a node twice; inside one job the ranks
    # compute every node together by design, and a rank waiting on a lock would fall out of step
    def try_lock(self, fp: str, doing: str = "") -> NoLock:
        return NoLock()

    def lock(self, fp: str) -> NoLock:
        return NoLock()


class RankHistory:
    """Node-slot history: every rank reads it, rank 0 writes it."""

    def __init__(self, history: History, writer: bool):
        self.history, self.writer = history, writer

    def last(self, name: str) -> dict | None:
        return self.history.last(name)

    def remember(self, name: str, components: dict) -> None:
        if self.writer:
            self.history.remember(name, components)


def prepare(group: Group, nodes: Any, resources: Any, cache: Cache, served: Plan | None = None,
            **executor_options: Any) -> tuple[Graph, Cache, ShardedExecutor]:
    """Check that every rank built the same plan, agree on the cached nodes, and return the
    graph (fingerprinted), this rank's view of the cache and a sharded executor, ready for
    ``run.execute()``. ``served``: the planner's choice, when the caller has planned already."""
    graph = nodes if isinstance(nodes, Graph) else Graph(nodes)
    rs = resources if isinstance(resources, ResourceSet) else ResourceSet(resources)
    with cache.filehash.active():  # model files are hashed through this cache's memo
        graph.fingerprint(rs, execution="deterministic" if executor_options.get("deterministic") else None,
                          served=served if served is not None else plan(graph, rs))  # a --fallback vertex keyed by its backend
    order = graph.order()
    group.check_plan({v.fingerprint: v.label for v in order})
    fps = list(dict.fromkeys(v.fingerprint for v in order))
    if cache_reads() == "rank0":  # rank 0 reads the node store and sends the others what it found
        found = {fp: e for fp in fps if (e := cache.nodes.get(fp)) is not None} if group.is_writer else {}
        blob = group.broadcast_bytes(encode_entries(found) if group.is_writer else b"", "sending cached nodes")
        cached = found if group.is_writer else decode_entries(blob, where="rank 0")
    else:  # a node counts as cached only if every rank found it
        entries = {fp: cache.nodes.get(fp) for fp in fps}
        agreed = group.min_ints([entries[fp] is not None for fp in fps], "the node-cache agreement")
        cached = {fp: entries[fp] for fp, ok in zip(fps, agreed) if ok}
    view = copy.copy(cache)
    view.nodes = RankStore(cache.nodes, cached, group.is_writer)
    view.history = RankHistory(cache.history, group.is_writer)
    view.requests = cache.requests if group.is_writer else ReadOnlyRequests(cache.requests)
    return graph, view, ShardedExecutor(group, cache=view.requests, **executor_options)
