"""Declaring metrics and resource providers; the registry.

A metric is a function plus a declaration: ``name``, ``version`` (bump it to invalidate
cached results), ``params`` (a pydantic model: validated, defaulted, hashed as canonical
JSON), ``parents`` (``{access_key: parent}``) and ``needs`` (resource names). The
function receives each parent's value and each resource under its key, plus ``params``
if it asks for it, Hamilton-style: dependencies come from the declaration, never from
guessing at runtime.

A *scorer* is a metric whose function is a generator: it ``yield``s a list of requests
(see ``requests.py``) and receives their results, as many rounds as it needs, then
``return``s its value. It never touches a model. Every other metric is an *aggregator*.

Calling a declared metric configures an instance (a :class:`Node`)::

    probability(name="forget_Q_A_Prob", parents={"stats": stats_node}, bind={"data": "tofu_forget"})

``bind`` renames resources for the node and everything upstream of it, so the same
declared subgraph can run on ``model`` or on ``retain_model``; the fingerprint uses the
bound resource's *fingerprint*, so identical work is found again whatever it was called.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from importlib.metadata import entry_points
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from .backend import declared_needs
from .fingerprint import code_identity

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class Params(BaseModel):
    """Base for metric parameters: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class NoParams(Params):
    pass


class DeclarationError(ValueError):
    """A metric or provider was declared inconsistently."""


class InputError(ValueError):
    """Raised by a metric about its input, when only running it can tell (a corpus whose key
    covariance is singular): the message is the whole story, so the node fails with this
    one line and no traceback; its siblings still run and nothing computed is lost."""


ParentSpec = Union[str, "Node"]
ParentsDecl = Union[Mapping[str, ParentSpec], Callable[[Any], Mapping[str, ParentSpec]], None]


@dataclass(frozen=True, eq=False)
class MetricDef:
    """A declared metric. Call it with params to get a configured :class:`Node`."""

    name: str
    version: str
    params: type[Params]
    parents: ParentsDecl
    needs: tuple[str, ...]
    fn: Callable[..., Any]
    scorer: bool
    doc: str = ""
    # The model work it asks for, checked by the planner before anything runs (backend.py):
    # a scorer's ``requests`` (resource -> kind -> token-statistic fields) and the fields
    # of its ancestors' results a metric ``uses`` (kind -> fields).
    requests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    uses: Mapping[str, Any] = field(default_factory=dict)
    # The form of its value in which higher means more knowledge (``knowledge.py``): a
    # ``Knowledge``, a function of the node's params returning one, or None (none declared).
    knowledge: Any = None

    def __call__(
        self,
        *,
        name: str | None = None,
        parents: Mapping[str, ParentSpec] | None = None,
        bind: Mapping[str, str] | None = None,
        group: str | None = None,
        **params: Any,
    ) -> "Node":
        try:
            p = self.params(**params)
        except ValidationError as e:
            who = f"{self.name}" + (f" (as {name!r})" if name else "")
            raise DeclarationError(f"invalid params for metric {who}: {e}") from None
        return Node(self, p, dict(parents or {}), dict(bind or {}), name, group)

    def default_parents(self, params: Params) -> dict[str, ParentSpec]:
        if self.parents is None:
            return {}
        if callable(self.parents):
            return dict(self.parents(params))
        return dict(self.parents)

    @property
    def kind(self) -> str:
        return "scorer" if self.scorer else "aggregator"

    @functools.cached_property
    def code(self) -> str:
        """The function's code identity (fingerprint.code_identity), computed once."""
        return code_identity(self.fn)

    def __repr__(self) -> str:
        return f"<metric {self.name} v{self.version} ({self.kind})>"


@dataclass(frozen=True, eq=False)
class Node:
    """A configured metric instance: metric + params + parents + resource binding + name."""

    metric: MetricDef
    params: Params
    parents: dict[str, ParentSpec] = field(default_factory=dict)
    bind: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    group: str | None = None

    def resolved_parents(self) -> dict[str, ParentSpec]:
        """Declared default parents, overridden key by key by the instance's own."""
        out = self.metric.default_parents(self.params)
        out.update(self.parents)
        return out

    def named(self, name: str, group: str | None = None) -> "Node":
        return Node(self.metric, self.params, self.parents, self.bind, name, group or self.group)

    def with_bind(self, **bind: str) -> "Node":
        """The same node reading other resources; a named node's name says which (``name@retain_model``).

        The qualified name keeps both sides apart when the node and its rebound copy are
        in one graph, as the graph qualifies a named parent reached through a binding.
        """
        name = self.name
        if name is not None:
            name += "".join(f"@{outer}" for local, outer in sorted(bind.items()) if local != outer)
        return Node(self.metric, self.params, self.parents, {**self.bind, **bind}, name, self.group)

    def __repr__(self) -> str:
        label = self.name or self.metric.name
        return f"<node {label}: {self.metric.name}({self.params.model_dump()})>"


@dataclass(frozen=True, eq=False)
class ProviderDef:
    """Derives one resource from others, lazily, once per run, only if a node needs it."""

    name: str
    version: str
    needs: tuple[str, ...]
    fn: Callable[..., Any]
    kind: str = "derived"


def origin(fn: Callable[..., Any]) -> str:
    """Where a function was declared, as its author knows it: ``FILE:qualname`` for a module
    imported by its path (a metric file given to ``--add-metric``), else ``module.qualname``."""
    name = getattr(fn, "__module__", None) or "?"
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    qualname = getattr(fn, "__qualname__", type(fn).__name__)
    if file and not getattr(module, "__package__", None):  # imported by path, not as part of a package
        return f"{file}:{qualname}"
    return f"{name}.{qualname}"


class Registry:
    """Name -> declared metric or provider. Third parties register through entry points."""

    def __init__(self) -> None:
        self.metrics: dict[str, MetricDef] = {}
        self.providers: dict[str, ProviderDef] = {}
        self._loaded_entry_points = False

    def add(self, m: MetricDef) -> MetricDef:
        old = self.metrics.get(m.name)
        if old is not None and old.fn is not m.fn and (old.fn.__module__, old.fn.__qualname__) != (m.fn.__module__, m.fn.__qualname__):
            raise DeclarationError(f"metric {m.name!r} is already declared by {origin(old.fn)}")
        self.metrics[m.name] = m
        return m

    def add_provider(self, p: ProviderDef) -> ProviderDef:
        self.providers[p.name] = p
        return p

    def get(self, name: str) -> MetricDef | None:
        if name not in self.metrics:
            self.load_entry_points()
        return self.metrics.get(name)

    def load_entry_points(self) -> None:
        """Import every ``evaldag.metrics`` entry point once (they register on import)."""
        if self._loaded_entry_points:
            return
        self._loaded_entry_points = True

        for ep in entry_points(group="evaldag.metrics"):
            obj = ep.load()
            if callable(obj) and not isinstance(obj, MetricDef):
                obj()

    def all(self) -> list[MetricDef]:
        self.load_entry_points()
        return sorted(self.metrics.values(), key=lambda m: m.name)


REGISTRY = Registry()


def check_inputs(fn: Callable[..., Any], keys: Iterable[str], who: str) -> None:
    """The function must accept every parent key and resource, and need nothing else."""
    sig = inspect.signature(fn)
    params = sig.parameters.values()
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        raise DeclarationError(f"{who}: *args is not allowed; inputs are passed by key")
    keys = set(keys)
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        for key in sorted(keys):
            if key not in sig.parameters:
                raise DeclarationError(f"{who}: parent/resource {key!r} is not an argument of the function")
    for p in params:
        if p.kind != p.VAR_KEYWORD and p.name != "params" and p.name not in keys and p.default is p.empty:
            raise DeclarationError(f"{who}: argument {p.name!r} is neither a parent key, a needed resource nor 'params'")


def metric(
    name: str,
    *,
    version: str,
    params: type[Params] = NoParams,
    parents: ParentsDecl = None,
    needs: Iterable[str] = (),
    register: bool = True,
    requests: Mapping[str, Mapping[str, Any]] | None = None,
    uses: Mapping[str, Any] | None = None,
    knowledge: Any = None,
) -> Callable[[Callable[..., Any]], MetricDef]:
    """Declare a metric. A generator function declares a scorer (it yields requests).

    ``requests`` (scorers): what it asks each model resource for, e.g.
    ``{"model": {"token_stats": ("logprob", "argmax"), "generate": ()}}``; ``uses``: the
    token-statistic fields of its ancestors' results it reads, e.g.
    ``{"token_stats": ("mu", "var")}``. The planner checks both against the backends.
    ``knowledge``: the form of the value in which higher means more knowledge
    (``engine/knowledge.py``; or a function of the params returning it), which robustness
    scores and the meta-evaluation of metrics read; None: the metric has none.
    """
    if not _NAME.match(name):
        raise DeclarationError(f"metric name {name!r} must be an identifier (letters, digits, _ . -)")
    if not isinstance(version, str) or not version:
        raise DeclarationError(f"metric {name!r}: version must be a non-empty string")
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise DeclarationError(f"metric {name!r}: params must be a pydantic model class")
    needs_t = tuple(needs)
    try:
        declared_needs(requests)
        declared_needs({"": uses or {}})
    except (ValueError, AttributeError) as e:
        raise DeclarationError(f"metric {name!r}: requests/uses: {e}") from None

    def wrap(fn: Callable[..., Any]) -> MetricDef:
        if not callable(parents):  # dynamic parents are checked when the graph is built
            check_inputs(fn, set(needs_t) | set(parents or {}), f"metric {name!r}")
        m = MetricDef(
            name=name,
            version=version,
            params=params,
            parents=parents,
            needs=needs_t,
            fn=fn,
            scorer=inspect.isgeneratorfunction(fn),
            doc=inspect.getdoc(fn) or "",
            requests=dict(requests or {}),
            uses=dict(uses or {}),
            knowledge=knowledge,
        )
        return REGISTRY.add(m) if register else m

    return wrap


def provider(name: str, *, version: str, needs: Iterable[str] = ()) -> Callable[[Callable[..., Any]], ProviderDef]:
    """Declare a resource provider: ``needs`` resources in, one resource ``name`` out."""

    def wrap(fn: Callable[..., Any]) -> ProviderDef:
        return REGISTRY.add_provider(ProviderDef(name, version, tuple(needs), fn))

    return wrap


class Metric:
    """Base class for metrics that keep state across calls (e.g. a loaded scorer model).

    Subclass with class attributes ``name``, ``version``, ``Params``, ``parents``,
    ``needs`` and a ``compute(self, **inputs)`` method (a generator for a scorer). The
    class is declared and registered when it is defined; calling the class's
    ``metric`` attribute configures instances exactly like a decorated function.
    ``instance`` is the one object whose ``compute`` every node of the class calls, so its
    state (a loaded scorer, a counter) lasts across runs in one process.
    """

    name: str = ""
    version: str = ""
    Params: type[Params] = NoParams
    parents: ParentsDecl = None
    needs: tuple[str, ...] = ()
    requests: Mapping[str, Mapping[str, Any]] | None = None
    uses: Mapping[str, Any] | None = None
    knowledge: Any = None
    metric: MetricDef
    instance: "Metric"

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if not cls.name:
            return
        cls.instance = instance = cls()
        compute = instance.compute
        # Wrap so the declared function keeps the method's signature without `self`.
        cls.metric = metric(cls.name, version=cls.version, params=cls.Params, parents=cls.parents, needs=cls.needs,
                            requests=cls.requests, uses=cls.uses, knowledge=cls.knowledge)(compute)

    def compute(self, **inputs: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError
