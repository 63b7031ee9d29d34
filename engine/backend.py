"""The backend contract: everything the engine asks of a model, declared and typed.

A backend is two halves (docs/writing-a-backend.md):

* a :class:`ModelResource`: cheap, made from a model spec. It has a ``fingerprint()`` and
  an ``identity()`` (part of every request-cache key), its ``capabilities()``, an
  ``encoder()`` and a ``describe()`` -- all without loading weights or sending a request --
  and ``load()``, which the executor calls on the first cache miss;
* a :class:`ModelAdapter`: what ``load()`` returns. The executor calls nothing on it but
  the members declared here: ``device``, ``dtype``, ``capabilities()``, ``batch_cost()``,
  ``budget_hint()``, ``group_budget()``, ``run_batch()`` and ``tokens_used()`` (and, under
  torchrun for weights split over the ranks, ``lockstep()``).

Why declared: an executor that probed adapters with ``hasattr`` would leave a backend
author reading the executor to learn what to write. Here the base classes give every
optional member a default, so a minimal backend writes ``run_batch`` and
``capabilities`` and nothing else.

Capabilities say, before anything runs, which request kinds a backend serves and which
token-statistic fields it can give: the planner (``planner.py``) checks every vertex's
declared needs against them and refuses a run it cannot finish. Backends are found by
scheme through the ``evaldag.backends`` entry-point group (:func:`backend_factory`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence

from .batching import Budget
from .requests import REQUEST_TYPES, Request, kind_of

# Token-statistic fields a TokenStats result carries (requests.TokenStatsResult).
TOKEN_FIELDS = ("logprob", "argmax", "mu", "var")
# How a missing field is named in a refusal.
_FIELD_WORDS = {"logprob": "the chosen token's log-prob", "argmax": "the greedy token (argmax)",
                "mu": "full-vocabulary log-prob statistics", "var": "full-vocabulary log-prob statistics"}


def _kind_words(kind: str) -> str:
    """A kind in words: its request class's ``words`` (the first alternative's for ``a|b``)."""
    cls = REQUEST_TYPES.get(kind.split("|")[0])
    return (cls.words if cls is not None else "") or f"{kind!r} requests"


@dataclass(frozen=True)
class Capabilities:
    """What a backend can serve: request kinds, and for ``token_stats`` which fields.

    ``token_fields`` is a subset of :data:`TOKEN_FIELDS`: ``logprob`` (the chosen
    token's log-prob), ``argmax`` (the greedy token, or a rank that says whether the
    chosen token is the greedy one), ``mu``/``var`` (full-vocabulary statistics, Min-K%++).
    A server that returns prompt log-probs gives ``{"logprob", "argmax"}``.
    """

    kinds: frozenset[str] = frozenset()
    token_fields: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", frozenset(self.kinds))
        object.__setattr__(self, "token_fields", frozenset(self.token_fields))
        bad = self.token_fields - set(TOKEN_FIELDS)
        if bad:
            raise ValueError(f"Capabilities: unknown token-statistic fields {sorted(bad)}; known: {TOKEN_FIELDS}")

    def missing(self, kind: str, fields: Iterable[str] = ()) -> str | None:
        """What of (``kind``, ``fields``) this backend cannot serve, in words; None if it can.

        ``kind`` may name alternatives, ``"generate|generate_text"``: a scorer that builds
        id requests for a tokenizer backend and text requests for a text backend.
        """
        if "|" in kind:
            return None if set(kind.split("|")) & self.kinds else _kind_words(kind)
        if kind not in self.kinds:
            return _kind_words(kind)
        if kind == "token_stats":
            lack = [f for f in TOKEN_FIELDS if f in set(fields) - self.token_fields]
            if lack:
                return " and ".join(dict.fromkeys(_FIELD_WORDS[f] for f in lack))
        return None

    def gives(self) -> str:
        """What it serves, in words (for a refusal)."""
        words = [_kind_words(k) for k in sorted(self.kinds) if k != "token_stats"]
        if "token_stats" in self.kinds:
            have = [f for f in TOKEN_FIELDS if f in self.token_fields]
            words.insert(0, "token statistics with " + " and ".join(dict.fromkeys(_FIELD_WORDS[f] for f in have))
                         + (" only" if len(have) < len(TOKEN_FIELDS) else ""))
        return ", ".join(words) or "nothing"

    def __or__(self, other: "Capabilities") -> "Capabilities":
        return Capabilities(self.kinds | other.kinds, self.token_fields | other.token_fields)


@dataclass(frozen=True)
class Identity:
    """Who computes a request: part of every request-cache key, known without loading.

    ``backend`` is the scheme (``hf``, ``openai``, ``replay``, ``toy``); ``device`` the
    device type. ``details`` are the rest, as sorted (name, value) pairs: version, dtype,
    and for a server its served model id, ``max_model_len`` and probe. When the
    fingerprint already determines every detail (``hf``: the files' hashes and the dtype
    are in it), ``in_fingerprint=True`` keeps the key ``fingerprint@device`` that caches
    written before backends had identities use, so they stay warm.
    """

    backend: str
    device: str = "cpu"
    details: tuple[tuple[str, str], ...] = ()
    in_fingerprint: bool = False

    def digest(self) -> str:
        """What the executor's model key adds after the fingerprint ("" when it is in the fingerprint)."""
        if self.in_fingerprint:
            return ""
        blob = json.dumps([self.backend, sorted(self.details)], separators=(",", ":"))
        return f"~{self.backend}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"

    def describe(self) -> dict:
        return {"backend": self.backend, "device": self.device, **dict(self.details)}


class ModelAdapter:
    """The loaded half. Subclass it; override ``run_batch`` and ``capabilities``.

    ``run_batch`` serves one batch of one kind, results in order (requests.py's result
    types), and raises :class:`OutOfMemory` when the batch does not fit: the executor then
    halves its budget (the only copy) and retries.
    """

    device: str = "cpu"
    dtype: str = ""

    def capabilities(self) -> Capabilities:
        raise NotImplementedError

    def run_batch(self, requests: Sequence[Request]) -> list[Any]:
        raise NotImplementedError

    def batch_cost(self, requests: Sequence[Request]) -> int:
        """Tokens the batch occupies: every row padded to the longest, by default."""
        return len(requests) * max((r.length() for r in requests), default=0)

    def budget_hint(self) -> dict | None:
        """``free_bytes`` and ``bytes_per_token`` for batching.default_budget (cuda), or None."""
        return None

    def group_budget(self, kind: str, budget: Budget) -> Budget:
        """How much of one kind the executor may hand over at once, given its budget.

        The executor calls this again with the halved budget after an out-of-memory error,
        so an adapter that schedules rows itself (continuous batching) reads its working
        set from ``budget`` and keeps no copy of its own to halve.
        """
        return budget

    def tokens_used(self) -> tuple[int, int] | None:
        """(real, padded) tokens of the last batch, when the adapter counted them."""
        return None

    def served(self, kind: str) -> dict | None:
        """How this adapter served ``kind`` when it chose among ways of computing it (run.json's
        ``executor.served``: e.g. GradNorm's batched or one-backward-per-row rows, and why), or None."""
        return None

    def lockstep(self) -> tuple[Any, int] | None:
        """For a resource whose weights are split over the job's ranks (``ModelResource.sharded``):
        the module whose forward passes every rank must make together and a token id a rank
        without work of its own feeds it (``distributed/lockstep.py``); None when not sharded."""
        return None

    def share_prefixes(self, kind: str, wanted: bool) -> bool:
        """Whether this adapter computes a context once for the requests of a batch that share it
        (``Request.prefix``), asked once per (model, kind) group before it is packed: ``wanted`` is
        the run's setting (``--prefix-sharing``; never under ``--deterministic``). True: the
        executor packs each prefix's requests into the same batch. By default no adapter shares."""
        return False

    def before_group(self, kind: str) -> None:
        """Called before the executor packs one (model, kind) group, in every process of the run:
        under torchrun on every rank together, a rank without a share of the group included.
        An adapter that may have let its model go for another (a vLLM engine, one per process)
        takes it back here: an engine start has collectives of its own, so it cannot wait for
        a batch that only some ranks run."""


class OutOfMemory(RuntimeError):
    """A batch did not fit on the device; the executor halves the batch and retries."""


class ServingError(RuntimeError):
    """A backend could not serve a batch, and its message is the whole story (which server or
    model, what it answered): the nodes that asked fail with this one line, no traceback, and
    the rest of the run goes on. Raise a subclass for a failure of the model's side, never for
    a bug of the backend's own (those keep their traceback)."""

    one_line = True  # read by run.py: the node's record is ``str(error)``


class ModelResource:
    """The cheap half, made from a model spec. Subclass it.

    Must give ``fingerprint``, ``capabilities``, ``encoder``, ``load``, ``describe``;
    ``identity`` defaults to the backend name on cpu.
    """

    kind: ClassVar[str] = "model"
    backend: ClassVar[str] = "custom"
    #: "fsdp", "fsdp2", "zero3": weights split over the job's ranks, so every forward pass is
    #: made by all of them together (its adapter's ``lockstep()``); None: each rank holds them whole
    sharded: str | None = None

    def fingerprint(self) -> str:
        raise NotImplementedError

    def capabilities(self) -> Capabilities:
        raise NotImplementedError

    def identity(self) -> Identity:
        return Identity(self.backend)

    def encoder(self) -> Any:
        raise NotImplementedError

    def load(self) -> ModelAdapter:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"backend": self.backend}

    def label(self) -> str:
        """How a message names this backend: its spec (``describe()["spec"]``, else ``backend:path``)."""
        d = self.describe()
        return str(d.get("spec") or (f"{self.backend}:{d['path']}" if d.get("path") else self.backend))

    def verify_unchanged(self) -> None:
        """Raise when the weights changed since ``fingerprint()`` (hf: a stat per file); the
        executor calls it before storing each batch. Nothing to check by default."""

    def weights_fingerprint(self) -> str | None:
        """A digest of the weights alone (not the tokenizer, dtype or backend), when this backend
        reads them from files: two backends over copies of one checkpoint give the same digest.
        None (the default: a server, an adapter over a base) where the weights cannot be seen;
        a ``--fallback`` is then proven the same model by a probe (``sameweights.py``)."""
        return None


@dataclass(eq=False)
class Routed(ModelResource):
    """``--fallback``: ``primary`` serves what it can; ``fallback`` (the same weights) the rest.

    "The same weights" is checked before the fallback serves anything (``sameweights.py``):
    weight digests where both read files, else a probe on the run's own rows.

    Its fingerprint is the primary's (same weights: the metric values do not depend on
    which served them), its capabilities the union; each request goes to the first that
    serves its kind and fields, under that backend's own request-cache key. The planner
    picks per scorer vertex (a vertex's requests, with every field its descendants use,
    go to one of the two), so one node's numbers never mix two backends.
    """

    primary: ModelResource
    fallback: ModelResource
    backend: ClassVar[str] = "routed"

    def fingerprint(self) -> str:
        return self.primary.fingerprint()

    def capabilities(self) -> Capabilities:
        return self.primary.capabilities() | self.fallback.capabilities()

    def identity(self) -> Identity:
        return self.primary.identity()

    def encoder(self) -> Any:
        return self.primary.encoder()

    def load(self) -> ModelAdapter:
        return self.primary.load()

    def describe(self) -> dict:
        return {**self.primary.describe(), "fallback": self.fallback.describe()}

    def label(self) -> str:
        return self.primary.label()

    def serving(self, kind: str, fields: Iterable[str] = ()) -> ModelResource:
        """Which of the two serves (kind, fields): the primary when it can."""
        return self.primary if self.primary.capabilities().missing(kind, fields) is None else self.fallback



# ----------------------------------------------------------------------------- handlers


class Handlers:
    """Per-backend registry of request handlers: ``kind -> fn(adapter, requests) -> results``.

    A plugin that adds a request kind registers its handler on the backend's registry
    (``HFAdapter.handlers.add("causal_trace", run)``) when its module is imported; the
    backend's capabilities then list the kind, and no engine module changes.
    """

    def __init__(self) -> None:
        self._fns: dict[str, Callable[[Any, list], list]] = {}
        self._budgets: dict[str, Callable[[Any, Budget], Budget]] = {}
        self._served: dict[str, Callable[[Any], dict | None]] = {}

    def add(self, kind: str, fn: Callable[[Any, list], list],
            group_budget: Callable[[Any, Budget], Budget] | None = None,
            served: Callable[[Any], dict | None] | None = None) -> None:
        """``served(adapter)``: the handler's account for run.json (ModelAdapter.served)."""
        kind_of(kind)  # the request kind must be registered first (requests.register_kind)
        self._fns[kind] = fn
        if group_budget is not None:
            self._budgets[kind] = group_budget
        if served is not None:
            self._served[kind] = served

    def remove(self, kind: str) -> None:
        self._fns.pop(kind, None)
        self._budgets.pop(kind, None)
        self._served.pop(kind, None)

    def kinds(self) -> frozenset[str]:
        return frozenset(self._fns)

    def get(self, kind: str) -> Callable[[Any, list], list] | None:
        return self._fns.get(kind)

    def group_budget(self, kind: str) -> Callable[[Any, Budget], Budget] | None:
        return self._budgets.get(kind)

    def served(self, kind: str) -> Callable[[Any], dict | None] | None:
        return self._served.get(kind)


# ----------------------------------------------------------------------------- load hooks

#: called with a resource before it loads: a backend that holds a device (a vLLM engine
#: reserves most of a GPU) registers one to let go of it first
_LOAD_HOOKS: list[Callable[[ModelResource], None]] = []


def add_load_hook(fn: Callable[[ModelResource], None]) -> None:
    if fn not in _LOAD_HOOKS:
        _LOAD_HOOKS.append(fn)


def before_load(model: ModelResource) -> None:
    """Run every load hook for ``model`` (the executor calls it before each ``load()``)."""
    for fn in list(_LOAD_HOOKS):
        fn(model)


# ----------------------------------------------------------------------------- entry points

BACKEND_GROUP = "evaldag.backends"
_FACTORIES: dict[str, Callable[..., ModelResource]] = {}


def register_backend(scheme: str, factory: Callable[..., ModelResource]) -> None:
    """Make ``scheme:`` specs build resources with ``factory(target, **qualifiers)``."""
    _FACTORIES[scheme] = factory


def backend_factory(scheme: str) -> Callable[..., ModelResource]:
    """The factory for ``scheme``: registered, else found in the ``evaldag.backends`` group."""
    if scheme not in _FACTORIES:
        for ep in entry_points(group=BACKEND_GROUP):
            if ep.name == scheme:
                _FACTORIES[scheme] = ep.load()
                break
        else:
            known = ", ".join(sorted(set(_FACTORIES) | {ep.name for ep in entry_points(group=BACKEND_GROUP)}))
            raise KeyError(f"unknown model backend {scheme!r}; installed: {known or 'none'}")
    return _FACTORIES[scheme]


def declared_needs(needs: Mapping[str, Mapping[str, Iterable[str]]] | None) -> dict[str, dict[str, frozenset[str]]]:
    """A metric's ``requests=`` declaration, normalized: resource -> kind -> fields."""
    out: dict[str, dict[str, frozenset[str]]] = {}
    for res, kinds in (needs or {}).items():
        out[res] = {}
        for kind, fields in kinds.items():
            fs = frozenset([fields] if isinstance(fields, str) else fields)
            if kind == "token_stats" and not fs:
                fs = frozenset(TOKEN_FIELDS)
            bad = fs - set(TOKEN_FIELDS) if kind == "token_stats" else frozenset()
            if bad:
                raise ValueError(f"unknown token-statistic fields {sorted(bad)}; known: {TOKEN_FIELDS}")
            out[res][kind] = fs
    return out

