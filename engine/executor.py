"""The executor: serves the requests of every ready scorer at once.

collect -> group by (model, kind) -> drop duplicates -> serve from the request cache ->
load the model on the first miss -> sort longest first and pack under a token budget ->
run -> check every answer -> store each batch at once -> scatter to every asker, in order.

Every answer a backend hands back, and every answer read from the request store, passes
``answers.Backend.admit`` / ``stored_ok`` here, the one place for every backend: an
impossible one (a NaN or positive log-prob, a length other than asked, no answer) stops the
run with one line before anything of its batch is stored, and a stored one is asked again.

Why this order: the cache is read *before* any model is touched, so a warm rerun never
loads weights; duplicates are dropped before batching, so a sequence is forwarded once
however many metrics ask for it; each finished batch is written at once, so a killed run
loses at most the batch in flight. On :class:`OutOfMemory` the batch is halved and the
rest of the group re-packed under the smaller budget; a single request that does not fit
is an error that says so.

The executor calls only what engine/backend.py declares: ``ModelResource.fingerprint`` /
``identity`` / ``load`` and ``ModelAdapter.run_batch`` / ``budget_hint`` / ``group_budget``
/ ``batch_cost`` / ``tokens_used`` / ``device`` / ``dtype``. It alone owns the batch budget:
one number per (model, kind), halved on out-of-memory; an adapter that schedules rows
itself is handed the current budget through ``group_budget`` and keeps no copy.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from .adapters.integrity import ModelChangedError
from .answers import Backend
from .backend import ModelAdapter, ModelResource, OutOfMemory, before_load
from . import malloc, streaming
from .batching import Budget, default_budget, halve, pack, pack_by_prefix, padded_tokens
from .cache import RequestStore
from .cache.codec import CorruptEntryWarning
from .progress import Estimating, bar as progress_bar
from .requests import Request, kind_of

# Heavy import: tqdm (only when a bar is drawn), inside engine/progress.py.

_COUNTERS = ("requests", "unique", "cached", "sequences_forwarded", "tokens_real", "tokens_padded",
             "batches", "oom_retries", "seconds")


@dataclass
class KindStats:
    requests: int = 0
    unique: int = 0
    cached: int = 0
    sequences_forwarded: int = 0
    tokens_real: int = 0
    tokens_padded: int = 0
    batches: int = 0
    oom_retries: int = 0
    seconds: float = 0.0

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.tokens_real / self.tokens_padded if self.tokens_padded else 0.0


@dataclass
class ExecutorStats:
    by_kind: dict[str, KindStats] = field(default_factory=lambda: defaultdict(KindStats))
    models_loaded: list[str] = field(default_factory=list)
    # model fingerprint -> request kind -> sequences forwarded (who did the work)
    by_model: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    # model fingerprint -> request kind -> the adapter's account of how it served them (ModelAdapter.served)
    served: dict[str, dict[str, dict]] = field(default_factory=lambda: defaultdict(dict))

    def summary(self) -> dict[str, Any]:
        """The ``executor`` block of run.json (totals, then per request kind)."""
        tot = KindStats()
        for s in self.by_kind.values():
            for k in _COUNTERS:
                setattr(tot, k, getattr(tot, k) + getattr(s, k))
        out: dict[str, Any] = {k: v for k, v in asdict(tot).items() if k != "seconds"}
        out["padding_fraction"] = tot.padding_fraction
        out["generations"] = self.by_kind["generate"].sequences_forwarded if "generate" in self.by_kind else 0
        out["model_loaded"] = bool(self.models_loaded)
        out["models_loaded"] = list(self.models_loaded)  # fingerprints of the models whose weights were read
        out["forwarded_by_model"] = {fp: dict(sorted(kinds.items())) for fp, kinds in self.by_model.items()}
        if self.models_loaded and malloc.state() is not None:
            out["malloc"] = malloc.state()
        if self.served:
            out["served"] = {fp: dict(sorted(kinds.items())) for fp, kinds in self.served.items()}
        out["seconds"] = tot.seconds
        out["by_kind"] = {kind: {**asdict(s), "padding_fraction": s.padding_fraction}
                          for kind, s in sorted(self.by_kind.items())}
        return out


FaultHook = Callable[[str, list], None]


class Executor:
    """Serve ``(model_resource, request)`` pairs; results come back in the same order.

    ``batch_tokens`` overrides the token budget per batch; ``device`` overrides the device
    whose default budget is used (otherwise the adapter's). ``deterministic`` runs every
    request alone, in a fixed order (slow; the values then do not depend on how requests
    were batched) and keeps its results apart in the request store. ``prefix_sharing`` lets an
    adapter that can (``ModelAdapter.share_prefixes``) compute a context shared by several
    requests once: they are packed into one batch (``batching.pack_by_prefix``); never under
    ``deterministic``. ``fault`` is a test hook,
    ``fault(kind, requests)``, called before every batch; it may raise (e.g.
    :class:`OutOfMemory`) to exercise the recovery paths.
    """

    def __init__(self, cache: RequestStore | None = None, progress: bool | None = False,
                 batch_tokens: int | None = None, device: str | None = None, fault: FaultHook | None = None,
                 refresh: bool = False, deterministic: bool = False, prefix_sharing: bool = True):
        self.cache = cache
        self.prefix_sharing = prefix_sharing and not deterministic
        self.refresh = refresh  # ask the model for every request; the answers replace the cached ones
        self.deterministic = deterministic
        self._store_keys: dict[str, str] = {}  # model fingerprint -> its key in the request store
        self._written: dict[str, list[str]] = defaultdict(list)  # store key -> request keys this run wrote
        self._backends: dict[str, dict] = {}  # model fingerprint -> its backend identity (kept with each result)
        self._answers: dict[str, Backend] = {}  # model fingerprint -> how its answers are judged
        self.progress = progress  # None: a bar only on a terminal; True: also on a pipe (engine/progress.py)
        self.batch_tokens = batch_tokens
        self.device = device
        self.fault = fault
        self.stats = ExecutorStats()
        self._adapters: dict[str, ModelAdapter] = {}
        self._budgets: dict[tuple[str, str], Budget] = {}
        self._sharing: dict[tuple[str, str], bool] = {}  # (model, kind) -> packed by shared prefix

    def adapter(self, model: ModelResource, fp: str | None = None) -> ModelAdapter:
        fp = fp or model.fingerprint()
        if fp not in self._adapters:
            before_load(model)  # a backend holding the device (a vLLM engine) lets go first
            self._adapters[fp] = model.load()
            self.stats.models_loaded.append(fp)
        return self._adapters[fp]

    def serve(self, work: Sequence[tuple[Any, Request]]) -> list[Any]:
        fps: dict[int, str] = {}  # fingerprint once per resource object, not per request
        models: dict[str, Any] = {}
        reqs: dict[str, Request] = {}
        groups: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for i, (model, req) in enumerate(work):
            fp = fps.get(id(model)) or fps.setdefault(id(model), self.model_key(model))
            if fp not in models:
                models[fp] = model
                self._store_keys.setdefault(fp, self.store_key(model, fp))  # before any load
                self._backends.setdefault(fp, model.identity().describe())
                self._answers.setdefault(fp, Backend.of(model))
            key = req.key()
            reqs[key] = req
            groups[(fp, req.kind)][key].append(i)
        out: list[Any] = [None] * len(work)
        rank = {kind: type(reqs[next(iter(keys))]).cost_rank for (_, kind), keys in groups.items()}
        for (fp, kind), by_key in sorted(groups.items(), key=lambda g: rank[g[0][1]]):  # cheapest kinds first
            st = self.stats.by_kind[kind]
            t0 = time.perf_counter()
            st.requests += sum(len(v) for v in by_key.values())
            st.unique += len(by_key)
            found = self._stored(fp, kind, self._lookup(fp, kind, list(by_key)), reqs)
            st.cached += len(found)
            missing = [(k, reqs[k]) for k in by_key if k not in found]
            if missing:
                found.update(self._compute(models[fp], fp, kind, missing, st))
            for key, idxs in by_key.items():
                for i in idxs:
                    out[i] = found[key]
            st.seconds += time.perf_counter() - t0
        return out

    @staticmethod
    def model_key(model: ModelResource) -> str:
        """Which model a request goes to: the fingerprint, plus the backend's identity digest
        unless the fingerprint holds it (two backends of the same weights stay apart)."""
        return model.fingerprint() + model.identity().digest()

    def store_key(self, model: ModelResource, fp: str) -> str:
        """The request store's model key: fingerprint + backend identity (+det), known without loading.

        ``fp`` is :meth:`model_key`: the bare fingerprint for a backend whose fingerprint
        covers its identity (hf, so the key is ``fingerprint@device``, the one caches had
        before backends had identities), else the fingerprint and the identity's digest. Reads and writes of one model use the key
        computed before its weights are loaded.
        """
        if fp in self._store_keys:
            return self._store_keys[fp]
        return f"{fp}@{model.identity().device}" + ("+det" if self.deterministic else "")

    def _stored(self, fp: str, kind: str, found: dict[str, Any], reqs: dict[str, Request]) -> dict[str, Any]:
        """The stored answers that may be served: an impossible one (stored before answers were
        checked) is left out, so it is asked again and the new answer replaces it."""
        backend = self._answers[fp]
        ok = {k: r for k, r in ((k, backend.stored_ok(kind, reqs[k], r)) for k, r in found.items()) if r is not None}
        if len(ok) < len(found):
            warnings.warn(f"{len(found) - len(ok)} stored {kind} answers of {backend.label()} are impossible (stored "
                          "before answers were checked); they are asked again", CorruptEntryWarning, stacklevel=2)
        return ok

    # -- hooks a data-parallel executor (evaldag.engine.distributed) overrides
    def _lookup(self, fp: str, kind: str, keys: list[str]) -> dict[str, Any]:
        """Cached results among ``keys`` (none when refreshing)."""
        return self.cache.get_many(self._store_keys[fp], keys) if self.cache and not self.refresh else {}

    def _share(self, batches: list[list], length: Callable) -> list[list]:
        """The batches this process runs (all of them, alone)."""
        return batches

    # -- running one (model, kind) group
    def _budget(self, adapter: ModelAdapter, fp: str, kind: str) -> Budget:
        """The one budget of (model, kind): from the device and the adapter's memory hint."""
        if (fp, kind) not in self._budgets:
            device = self.device or adapter.device
            self._budgets[(fp, kind)] = default_budget(device, self.batch_tokens, adapter.budget_hint(),
                                                       1 if self.deterministic else kind_of(kind).max_batch)
        return self._budgets[(fp, kind)]

    def _group(self, adapter: ModelAdapter, kind: str, budget: Budget) -> Budget:
        """What one packed batch may hold: an adapter that schedules rows itself (continuous
        batching) may take larger groups and keep its working set under ``budget``; never
        under --deterministic, where every request runs alone."""
        return budget if self.deterministic else adapter.group_budget(kind, budget)

    def _compute(self, model: Any, fp: str, kind: str, items: list[tuple[str, Request]], st: KindStats) -> dict:
        try:
            return self._compute_checked(model, fp, kind, items, st)
        except ModelChangedError as e:
            e.model_fp = fp  # the runner forgets the nodes computed from it
            self.forget(fp)
            raise

    def forget(self, fp: str) -> None:
        """Delete every answer this run stored for model ``fp`` (its files changed under the run)."""
        key = self._store_keys.get(fp)
        discard = getattr(self.cache, "discard", None)
        if discard is not None and key is not None:
            discard(key, self._written.pop(key, []))

    @staticmethod
    def _unchanged(model: ModelResource) -> None:
        """Raise ModelChangedError when the model's files changed since its fingerprint (a stat each)."""
        model.verify_unchanged()

    def _compute_checked(self, model: Any, fp: str, kind: str, items: list[tuple[str, Request]], st: KindStats) -> dict:
        adapter = self.adapter(model, fp)
        adapter.before_group(kind)  # on every rank, before its share is known
        length = _length
        if self.deterministic:
            items = sorted(items, key=lambda x: x[0])  # a fixed order, whatever order they were asked in
        shares = adapter.share_prefixes(kind, self.prefix_sharing)
        self._sharing[(fp, kind)] = shares
        if shares:
            packer = lambda xs, b: pack_by_prefix(xs, length, _prefix, b)  # noqa: E731
        else:
            packer = lambda xs, b: pack(xs, length, b)  # noqa: E731
        queue = deque(self._share(packer(items, self._group(adapter, kind, self._budget(adapter, fp, kind))), length))
        results: dict[str, Any] = {}
        # a forecast from the first rows: not for generation (every sequence runs at once, the first to finish
        # are few) nor GradNorm (its first rows run alone): they wait for a tenth of the tokens
        bar = self._bar(kind, sum(length(x) for b in queue for x in b), patient=bool(items) and type(items[0][1]).cost_rank >= 1)
        try:
            while queue:
                batch = queue.popleft()
                early: dict[int, Any] = {}  # rows stored as they finished, before the batch returned
                with streaming.sink(lambda i, r: self._store_early(adapter, model, fp, kind, batch, i, r, early, bar)):
                    got = self._run(adapter, kind, batch)
                if got is None:  # out of memory: halve it, and re-pack the rest under the smaller budget
                    if len(batch) == 1:
                        raise RuntimeError(
                            f"a single {kind} request of {batch[0][1].length()} tokens does not fit on "
                            f"{adapter.device}; use a smaller dtype or shorter inputs")
                    st.oom_retries += 1
                    old = self._budgets[(fp, kind)]  # the one number: halved here, nowhere else
                    cost = adapter.batch_cost([r for _, r in batch])
                    new = Budget(max(1, min(old.tokens, cost) // 2), old.max_batch)
                    self._budgets[(fp, kind)] = new
                    rest = [x for b in queue for x in b]
                    queue = deque([*halve(batch), *packer(rest, self._group(adapter, kind, new))])
                    continue
                got = self._answers[fp].admit(kind, [r for _, r in batch], got)  # before anything is stored
                self._record(adapter, kind, batch, got, st)
                self.stats.by_model[fp][kind] += len(batch)
                self._unchanged(model)  # what is stored under fp comes from the bytes fp names
                rest = [j for j in range(len(batch)) if j not in early]
                if self.cache is not None and rest:
                    self.cache.put_many(self._store_keys[fp], [(batch[j][0], kind, got[j]) for j in rest],
                                        meta=self._batch_meta(adapter, fp, kind, batch))
                    self._written[self._store_keys[fp]].extend(batch[j][0] for j in rest)
                results.update((k, r) for (k, _), r in zip(batch, got))
                bar.update(sum(length(batch[j]) for j in rest))
        finally:
            bar.close()
        account = adapter.served(kind)
        if account:
            self.stats.served[fp][kind] = account
        self._unchanged(model)  # after the last batch: nothing handed on was computed from other bytes
        return results

    def _store_early(self, adapter: ModelAdapter, model: Any, fp: str, kind: str, batch: list, i: int, result: Any,
                     early: dict[int, Any], bar: Any) -> None:
        """Row ``i`` finished before its batch returned (streaming.finished): checked and stored now,
        so a stop loses only the rows in flight; the bar moves by it."""
        key, req = batch[i]
        result = self._answers[fp].admit(kind, [req], [result])[0]
        if self.cache is not None:
            self._unchanged(model)
            self.cache.put_many(self._store_keys[fp], [(key, kind, result)], meta=self._batch_meta(adapter, fp, kind, batch))
            self._written[self._store_keys[fp]].append(key)
        early[i] = result
        bar.update(_length(batch[i]))

    def _run(self, adapter: ModelAdapter, kind: str, batch: list[tuple[str, Request]]) -> list | None:
        """The batch's results, or None when it ran out of memory."""
        requests = [r for _, r in batch]
        try:
            if self.fault is not None:
                self.fault(kind, requests)
            got = adapter.run_batch(requests)
        except OutOfMemory:
            return None
        if len(got) != len(requests):
            raise RuntimeError(f"adapter returned {len(got)} results for {len(requests)} {kind} requests")
        return got

    def _batch_meta(self, adapter: ModelAdapter, fp: str, kind: str, batch: list) -> dict:
        """How a result was computed (device, dtype, batch shape): kept with each request result."""
        budget = self._budgets.get((fp, kind))
        return {"device": str(adapter.device), "dtype": adapter.dtype,
                "batch_size": len(batch), "batch_padded_tokens": padded_tokens(batch, _length),
                "budget_tokens": budget.tokens if budget else None, "deterministic": self.deterministic,
                "prefix_sharing": self._sharing.get((fp, kind), False),
                "backend": self._backends.get(fp, {})}

    @staticmethod
    def _record(adapter: ModelAdapter, kind: str, batch: list, got: list, st: KindStats) -> None:
        tokens = adapter.tokens_used()
        real, padded = tokens if tokens else (sum(_length(x) for x in batch), padded_tokens(batch, _length))
        st.tokens_real += int(real)
        st.tokens_padded += int(padded)
        st.sequences_forwarded += len(batch)
        st.batches += 1

    def _bar(self, kind: str, total: int, patient: bool = False) -> Any:
        """Tokens done, on a terminal (progress None) or when forced (True); see engine/progress.py."""
        return Estimating(progress_bar(total, f"evaldag {kind}", "tok", self.progress), f"evaldag: {kind}", total, self.progress,
                          patient=patient)


def _length(item: tuple[str, Request]) -> int:
    return item[1].length()


def _prefix(item: tuple[str, Request]) -> tuple[int, ...] | None:
    return item[1].prefix()
