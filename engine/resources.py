"""Resources: named inputs no metric computes, each with a fingerprint and a lazy value.

Whatever the user binds at run time (a model, a dataset split, retain logs, word
vectors, a plain Python value) is wrapped as a :class:`Resource`. Its fingerprint is
computed without loading weights where possible (a model directory hashes its files);
its value is loaded once per run, only if some node needs it. Providers derive new
resources from others in the same lazy way.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from .adapters.chat_quirks import model_facts
from .declare import REGISTRY, ProviderDef
from .fingerprint import hash_value


@runtime_checkable
class Resource(Protocol):
    kind: str  # "model", "data" or "other": what explain() says changed

    def fingerprint(self) -> str: ...

    def value(self) -> Any: ...


class Value:
    """A plain in-memory value; fingerprinted strictly from its content."""

    def __init__(self, obj: Any, kind: str = "other", source: str = ""):
        self.obj = obj
        self.kind = kind
        self.source = source  # provenance only (e.g. the retain logs' file), not hashed
        self._fp: str | None = None

    def fingerprint(self) -> str:
        if self._fp is None:
            self._fp = hash_value(self.obj)
        return self._fp

    def value(self) -> Any:
        return self.obj

    def describe(self) -> dict:
        return {"type": type(self.obj).__name__, **({"source": self.source} if self.source else {})}


class Rows:
    """Dataset rows loaded lazily by ``loader``; the fingerprint is a hash of the rows used.

    ``source`` (a path or hub id) is provenance only: two copies of the same rows in
    different places share cached results; an edited row changes the fingerprint.
    """

    kind = "data"

    def __init__(self, loader: Callable[[], list[dict]], source: str = "", limit: float | None = None,
                 also: tuple[str, ...] = ()):
        self.loader = loader
        self.source = source
        self.limit = limit  # the first N rows, or a fraction below 1 of them (--limit)
        self.also = also  # other split names it answers to (a relearn's split=forget: MUSE's forget corpus)
        self._rows: list[dict] | None = None
        self._fp: str | None = None

    def value(self) -> list[dict]:
        if self._rows is None:
            self._rows = first_rows(list(self.loader()), self.limit)
        return self._rows

    def fingerprint(self) -> str:
        if self._fp is None:
            self._fp = hash_rows(self.value())
        return self._fp

    def describe(self) -> dict:
        """The source (and ``--limit``); the row count only once loaded (describing never loads data)."""
        return {"source": self.source, **({"limit": self.limit} if self.limit is not None else {}),
                **({"rows": len(self._rows)} if self._rows is not None else {})}


def first_rows(rows: list, limit: float | None) -> list:
    """The first ``limit`` rows (a whole number), or the first ``ceil(limit * len)`` for a fraction
    below 1: lm-evaluation-harness's ``--limit``. The rows used are what the fingerprint hashes."""
    if limit is None:
        return rows
    n = int(limit) if limit >= 1 else math.ceil(len(rows) * limit)
    return rows[:n]


def hash_rows(rows: list) -> str:
    """Rows as read from JSON files hash fast through canonical JSON; others strictly."""

    try:
        text = json.dumps(rows, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return hash_value(rows)
    return "j" + hashlib.sha256(text.encode()).hexdigest()[1:]


class Derived:
    """A resource made by a provider from other resources (run at most once per run)."""

    kind = "derived"

    def __init__(self, provider: ProviderDef, inputs: Mapping[str, Resource]):
        self.provider = provider
        self.inputs = dict(inputs)
        self._value: Any = None
        self._done = False

    def fingerprint(self) -> str:
        parts = {k: r.fingerprint() for k, r in sorted(self.inputs.items())}
        return hash_value({"provider": self.provider.name, "version": self.provider.version, "inputs": parts})

    def value(self) -> Any:
        if not self._done:
            self._value = self.provider.fn(**{k: r.value() for k, r in self.inputs.items()})
            self._done = True
        return self._value

    def describe(self) -> dict:
        return {"provider": self.provider.name}


def as_resource(obj: Any, kind: str = "other") -> Resource:
    """Wrap a user-supplied object. Model resources (with load/encoder) are their own value."""
    if isinstance(obj, (Value, Rows, Derived)):
        return obj
    if hasattr(obj, "fingerprint") and hasattr(obj, "load") and hasattr(obj, "encoder"):
        return _ModelBinding(obj)
    if hasattr(obj, "fingerprint") and hasattr(obj, "value") and hasattr(obj, "kind"):
        return obj
    return Value(obj, kind)


class _ModelBinding:
    """A model resource as seen by nodes: the handle itself (scorers build requests with it)."""

    kind = "model"

    def __init__(self, model: Any):
        self.model = model

    def fingerprint(self) -> str:
        return self.model.fingerprint()

    def value(self) -> Any:
        return self.model

    def describe(self) -> dict:
        return self.model.describe() if hasattr(self.model, "describe") else {}

    def chat_facts(self) -> Any:
        """The handle's chat-template facts (run.json's system prompt), where its files tell them."""
        return model_facts(self.model)


class MissingResource(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class ResourceSet:
    """The resources of one run: supplied ones plus providers, resolved on demand."""

    def __init__(self, supplied: Mapping[str, Any] | None = None, providers: Mapping[str, ProviderDef] | None = None):
        self.supplied = {k: as_resource(v) for k, v in (supplied or {}).items()}
        self._registered = providers is None  # the registry's providers: found as metrics are
        self.providers = dict(REGISTRY.providers if providers is None else providers)
        self._derived: dict[str, Derived] = {}

    def _provider(self, name: str) -> ProviderDef | None:
        """The provider of ``name``; a miss loads the ``evaldag.metrics`` entry points once,
        as a metric looked up by name does (a provider registers when its module is imported)."""
        if name not in self.providers and self._registered:
            REGISTRY.load_entry_points()
            self.providers = dict(REGISTRY.providers)
        return self.providers.get(name)

    def has(self, name: str) -> bool:
        return name in self.supplied or self._provider(name) is not None

    def get(self, name: str, asked_by: str = "", _stack: tuple[str, ...] = ()) -> Resource:
        if name in self.supplied:
            return self.supplied[name]
        if name in self._derived:
            return self._derived[name]
        prov = self._provider(name)
        if prov is None:
            who = f" (needed by {asked_by})" if asked_by else ""
            known = ", ".join(sorted(set(self.supplied) | set(self.providers))) or "none"
            raise MissingResource(f"missing resource {name!r}{who}; supplied or derivable: {known}")
        if name in _stack:
            raise MissingResource(f"providers form a cycle: {' -> '.join(_stack + (name,))}")
        inputs = {n: self.get(n, f"provider {name}", _stack + (name,)) for n in prov.needs}
        self._derived[name] = Derived(prov, inputs)
        return self._derived[name]

    def model_fingerprints(self) -> dict[str, str]:
        return {k: r.fingerprint() for k, r in self.supplied.items() if r.kind == "model"}

    def described(self, resources: Mapping[str, str]) -> dict[str, dict]:
        """What each supplied resource a node reads is (path, source, rows), by its name in the run:
        kept in the node's cache entry, so ``cache explain`` says which model and data it is for."""
        out = {}
        for name in resources.values():
            r = self.supplied.get(name)
            try:
                d = {"kind": r.kind, **r.describe()} if r is not None and hasattr(r, "describe") else None
                out[name] = json.loads(json.dumps(d, default=str))  # plain JSON, as the entry's header holds it
            except Exception:  # noqa: BLE001 - a description is provenance: never fail a node for it
                out[name] = None
        return {k: v for k, v in out.items() if v}
