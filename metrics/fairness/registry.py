"""What a fairness metric is, and the name -> builder registry that turns queries into nodes.

Each metric module (``weat.py``, ``rnd.py``, ``rnsb.py``, ``mac.py``, ``ect.py``,
``ripa.py``) holds its formula and declares its node once, with :func:`fairness_metric`:
the engine's ``@metric`` declaration (node name, version, params) and, in the same
call, its entry here: its WEFE name (the key in ``WEAT_EVAL.json`` and the word
``--metrics`` takes), its template, the fields of WEFE's NaN result, its options class
and how its node is wired onto a query's lookup node. Nothing else lists the metrics:
``metric_names()``, template checks, NaN results, ``MetricSettings`` and
``query_nodes`` all read the registry, which is filled as the engine's is (a module
registers on import, and the ``evaldag.metrics`` entry points import every module).

``query_nodes`` is what the WEAT benchmark and the WEFE facade both call. It checks
every (query, metric) pair against the metric's template *before* building anything,
so a query WEAT cannot take fails at once, naming the node, the query and both
cardinalities; no vector has been read and no model loaded. Sharing needs no
bookkeeping: set, cosine and s nodes are built from words, settings and vectors only,
so the graph merges every repeat into one vertex. Display names are
``<query id>/<METRIC>`` and ``<query id>/lookup`` inside ``group``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from ...engine import Node, Params, Result, metric
from ...engine.declare import REGISTRY, MetricDef, NoParams
from .lookup import LookupOptions, QueryLookup
from .query import Query
from .word_sets import Source, lookup_node, set_node

__all__ = [
    "Build", "FairnessMetric", "MetricSettings", "TemplateError", "as_result", "check_lookup",
    "check_template", "fairness_metric", "fitting_metrics", "get", "given_by_builder", "metric_names", "nan_result",
    "query_nodes", "wefe_fields",
]


class TemplateError(ValueError):
    """A query whose number of target / attribute sets a metric cannot take."""


@dataclass(frozen=True)
class Build:
    """What a builder gets: the query, its lookup node, the metric's options, word-set nodes.

    ``set_node(words)`` is the node of one word set under this query's lookup settings
    and vector source (for metrics that share work per set, as WEAT's cosines).
    """

    query: Query
    lookup: Node
    options: Any
    set_node: Callable[[Sequence[str]], Node]


@dataclass(frozen=True)
class FairnessMetric:
    """One registered metric. ``template`` is (n_targets, n_attributes); ``"n"``: one or more."""

    name: str
    template: tuple[int | str, int | str]
    nan_fields: Mapping[str, Any]
    build: Callable[[Build], Node]
    options: type[Params] | None = None
    order: int = 100
    node: str = ""

    @property
    def key(self) -> str:
        """Its key in :class:`MetricSettings`: the name in lower case."""
        return self.name.lower()


_REGISTRY: dict[str, FairnessMetric] = {}


def given_by_builder(params: Any) -> dict[str, Any]:
    """``parents=`` of a fairness node: its parents depend on the query, so its builder gives them.

    (Declaring parents as a function defers the engine's argument check to graph
    building, where every parent is known.)
    """
    return {}


def _on_lookup(b: Build, node: MetricDef) -> Node:
    """The default wiring: the query's lookup node is the only parent; the options are the params."""
    return node(parents={"lookup": b.lookup}, **(b.options.model_dump() if b.options is not None else {}))


def fairness_metric(
    name: str, *, node: str, version: str, template: tuple[int | str, int | str], nan_fields: Mapping[str, Any],
    params: type[Params] | None = None, options: type[Params] | None = None, order: int = 100,
    build: Callable[[Build, MetricDef], Node] = _on_lookup, register: bool = True,
) -> Callable[[Callable[..., Any]], MetricDef]:
    """Declare the decorated function as fairness metric ``name``, once.

    It becomes the engine metric ``node`` (``@metric(node, version=..., params=...)``,
    parents given by ``build``; ``register=False`` keeps it out of the engine's registry,
    as for ``@metric``) and the registry's entry ``name``: ``template``, ``nan_fields``,
    ``options`` (the class users set through ``MetricSettings``; default: ``params``),
    ``order`` (WEFE's metrics use 10..60) and ``build(b, node)``, which returns the
    configured node for one query (default: the lookup node as its one parent, the
    options as its params).
    """
    def wrap(fn: Callable[..., Any]) -> MetricDef:
        declared = metric(node, version=version, params=params or NoParams, parents=given_by_builder,
                          register=register)(fn)
        old = _REGISTRY.get(name)
        if old is not None and old.node != node:
            raise ValueError(f"fairness metric {name!r} is already registered by node {old.node!r}")
        _REGISTRY[name] = FairnessMetric(name, tuple(template), dict(nan_fields), lambda b: build(b, declared),
                                         options if options is not None else params, order, node)
        return declared
    return wrap


def _registered() -> list[FairnessMetric]:
    REGISTRY.load_entry_points()  # every module of the library (and a plugin's) has declared its metrics
    return sorted(_REGISTRY.values(), key=lambda m: m.order)  # stable: ties keep registration order


def metric_names() -> tuple[str, ...]:
    """Every registered metric, WEFE's six first in WEFE's order."""
    return tuple(m.name for m in _registered())


def get(name: str) -> FairnessMetric:
    if name not in _REGISTRY:
        REGISTRY.load_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown WEFE metric {name!r}; known: {', '.join(metric_names())}") from None


# -- templates and results ------------------------------------------------------------------
def _fits(expected: int | str, given: int) -> bool:
    return given >= 1 if expected == "n" else given == expected


def _say(expected: int | str) -> str:
    return "one or more" if expected == "n" else str(expected)


def check_template(metric: str, query_name: str, given: tuple[int, int]) -> None:
    """Raise ``TemplateError`` unless ``given`` = (n_targets, n_attributes) fits ``metric``.

    Graph building calls this before any model is loaded, so a (3, 2) query bound to
    WEAT fails at once with the metric, the query and both cardinalities named.
    """
    expected = get(metric).template
    n_t, n_a = given
    if _fits(expected[0], n_t) and _fits(expected[1], n_a):
        return
    raise TemplateError(
        f"{metric} takes {_say(expected[0])} target set(s) and {_say(expected[1])} attribute "
        f"set(s) (template {expected}); query '{query_name}' has {n_t} target set(s) and "
        f"{n_a} attribute set(s) (template {(n_t, n_a)})"
    )


def check_lookup(metric: str, lookup: QueryLookup) -> None:
    if not isinstance(lookup, QueryLookup):
        raise TypeError(f"{metric} takes a QueryLookup (see lookup_query), got {type(lookup).__name__}")
    check_template(metric, lookup.query_name, lookup.template)


def nan_result(metric: str, lookup: QueryLookup, reason: str | None = None) -> dict[str, Any]:
    """WEFE's NaN result for ``metric`` plus the ``reason`` WEFE only logs.

    One deliberate addition: WEAT's NaN result has ``p_value`` (WEFE's lacks it, which
    makes ``result["p_value"]`` raise KeyError, WEFE issue #21).
    """
    out: dict[str, Any] = {"query_name": lookup.query_name, "result": math.nan}
    for key, value in get(metric).nan_fields.items():
        out[key] = value.copy() if isinstance(value, dict) else value
    out["reason"] = reason or lookup.reason
    return out


def as_result(fields: dict[str, Any]) -> Result:
    """A metric's WEFE-style dict as a Result: ``result`` -> agg_value, ``reason`` -> reason."""
    fields = dict(fields)
    agg = fields.pop("result")
    reason = fields.pop("reason", None)
    return Result(agg, extra=fields, reason=reason)


def wefe_fields(result: Result) -> dict[str, Any]:
    """A metric node's Result back as WEFE's dict: query_name, result, the rest, reason."""
    extra = dict(result.extra)
    out: dict[str, Any] = {"query_name": extra.pop("query_name", None), "result": result.agg_value}
    out.update(extra)
    if result.reason:
        out["reason"] = result.reason
    return out


# -- settings and building ---------------------------------------------------------------------
class MetricSettings(BaseModel):
    """Each metric's options under its lower-case name, e.g. ``MetricSettings(rnd=RndParams(distance="cos"))``.

    A metric left out runs with its options' defaults. Keys are checked against the
    registry and values validated by the metric's options class (a dict is accepted).
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _validate_options(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        by_key = {m.key: m for m in _registered()}
        out = {}
        for key, value in data.items():
            m = by_key.get(key)
            if m is None or m.options is None:
                known = sorted(k for k, x in by_key.items() if x.options is not None)
                raise ValueError(f"no fairness metric with options is called {key!r}; known: {known}")
            out[key] = value if isinstance(value, m.options) else m.options.model_validate(value)
        return out

    def options_for(self, name: str) -> Any:
        """The options ``name`` runs with (None for a metric without options)."""
        m = get(name)
        given = (self.model_extra or {}).get(m.key)
        return given if given is not None else (m.options() if m.options is not None else None)


def fitting_metrics(template: tuple[int, int], metrics: Iterable[str] | None = None) -> list[str]:
    """The metrics whose template accepts a query of this template, in registry order."""
    out = []
    for m in metric_names() if metrics is None else metrics:
        try:
            check_template(m, "", template)
        except TemplateError:
            continue
        out.append(m)
    return out


def metric_node(name: str, query: Query, lookup: LookupOptions, settings: MetricSettings,
                source: Source = "embeddings", lookup_parent: Node | None = None) -> Node:
    """One metric on one query (unnamed; ``query_nodes`` names it).

    ``lookup_parent`` is the query's lookup node when the caller has already built
    (and named) it; otherwise it is built here.
    """
    m = get(name)
    lk = lookup_parent or lookup_node(query, lookup, source)
    return m.build(Build(query, lk, settings.options_for(name), lambda words: set_node(words, lookup, source)))


def query_nodes(
    query_id: str,
    query: Query | Mapping[str, Any],
    metrics: Sequence[str] | None = None,
    *,
    lookup: LookupOptions | None = None,
    settings: MetricSettings | None = None,
    source: Source = "embeddings",
    group: str | None = "WEAT",
) -> list[Node]:
    """Named nodes for ``query``: every metric whose template fits, or exactly ``metrics``.

    Named metrics are checked first: one that cannot take the query raises
    ``TemplateError`` naming the node (``group/query_id/METRIC``), the query, the
    template the metric expects and the one the query has. The query's lookup node is
    named too (``query_id/lookup``: found and missing words per set, the NaN reason)
    but is not returned: as a parent it is in the graph without being a headline
    value in the summary.
    """
    query = query if isinstance(query, Query) else Query.model_validate(query)
    lookup = lookup or LookupOptions()
    settings = settings or MetricSettings()
    where = f"{group}/{query_id}" if group else query_id
    if metrics is None:
        chosen = fitting_metrics(query.template)
        if not chosen:
            raise TemplateError(
                f"query {where!r} ('{query.query_name}', template {query.template}) fits no WEFE "
                f"metric: {', '.join(f'{m.name} {m.template}' for m in _registered())}"
            )
    else:
        chosen = list(dict.fromkeys(metrics))
        for m in chosen:
            try:
                check_template(m, query.query_name, query.template)
            except TemplateError as e:
                raise TemplateError(f"node '{where}/{m}': {e}") from None
    lk = lookup_node(query, lookup, source).named(f"{query_id}/lookup", group)
    return [metric_node(m, query, lookup, settings, source, lk).named(f"{query_id}/{m}", group) for m in chosen]
