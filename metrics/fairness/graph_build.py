"""Turning queries into WEFE graph nodes: templates checked first, shared work shared.

``query_nodes`` is what the WEAT benchmark and the WEFE facade both call. It checks
every (query, metric) pair against the metric's template *before* building anything,
so a query WEAT cannot take fails at once, naming the node, the query and both
cardinalities; no vector has been read and no model loaded.

Sharing needs no bookkeeping here: a set node is built from the words and the lookup
settings only, a cosine node from two set nodes, an s node from two cosine nodes, so
the graph merges every repeat into one vertex (same metric, params and parents = same
structural key). Display names are ``<query id>/<METRIC>`` and ``<query id>/lookup``
inside ``group``, unique per group as the engine requires.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ...engine import Node, Params
from .hf_embeddings import HFSource, word_set_hf
from .nodes import (
    PValueParams,
    RipaParams,
    RndParams,
    RnsbParams,
    cosine,
    ect_node,
    mac_node,
    query_lookup,
    ripa_node,
    rnd_node,
    rnsb_node,
    weat_effect_size_node,
    weat_node,
    weat_p_value_node,
    weat_s,
    word_set,
)
from .queries import LookupOptions, WordSetQuery
from .wefe_math import TEMPLATES, TemplateError, check_template

__all__ = [
    "METRICS",
    "MetricSettings",
    "Source",
    "WeatOptions",
    "fitting_metrics",
    "lookup_node",
    "query_nodes",
    "set_node",
    "weat_s_node",
]

#: WEFE's metrics, in WEFE's order; the keys of WEAT_EVAL.json's inner dicts
METRICS: tuple[str, ...] = ("WEAT", "RND", "RNSB", "MAC", "ECT", "RIPA")

#: where vectors come from: the name of a word-embeddings resource, or a model's input embeddings
Source = str | HFSource


class WeatOptions(Params):
    return_effect_size: bool = False
    calculate_p_value: bool = True
    p_value: PValueParams = PValueParams()


class MetricSettings(Params):
    """Every metric's own options, in one value (the benchmark's and the facade's)."""

    weat: WeatOptions = WeatOptions()
    rnd: RndParams = RndParams()
    rnsb: RnsbParams = RnsbParams()
    ripa: RipaParams = RipaParams()


def set_node(words: Sequence[str], lookup: LookupOptions, source: Source = "embeddings") -> Node:
    """The lookup of one word set; shared by every query that uses these words alike."""
    words = tuple(words)
    common = {"words": words, "variants": lookup.variants(words),
              "strategy": lookup.strategy, "normalize": lookup.normalize}
    if isinstance(source, HFSource):
        return word_set_hf(leading_space=source.leading_space, bind={"model": source.resource}, **common)
    return word_set(bind={"embeddings": source} if source != "embeddings" else None, **common)


def lookup_node(query: WordSetQuery, lookup: LookupOptions, source: Source = "embeddings") -> Node:
    """The query's named sets under the lost-vocabulary rule (the NaN reason lives here)."""
    parents = {f"t{i}": set_node(w, lookup, source) for i, w in enumerate(query.target_sets.values())}
    parents.update({f"a{i}": set_node(w, lookup, source) for i, w in enumerate(query.attribute_sets.values())})
    return query_lookup(
        parents=parents,
        target_names=tuple(query.target_sets),
        attribute_names=tuple(query.attribute_sets),
        lost_vocabulary_threshold=lookup.lost_vocabulary_threshold,
        strategy=lookup.strategy,
        settings=lookup.describe(),
    )


def weat_s_node(target: Sequence[str], attr_a: Sequence[str], attr_b: Sequence[str],
                lookup: LookupOptions, source: Source = "embeddings") -> Node:
    """s(w, A, B) for the words of ``target``, from cos(T, A) and cos(T, B)."""
    t = set_node(target, lookup, source)
    cos_a = cosine(parents={"x": t, "y": set_node(attr_a, lookup, source)})
    cos_b = cosine(parents={"x": t, "y": set_node(attr_b, lookup, source)})
    return weat_s(parents={"cos_a": cos_a, "cos_b": cos_b})


def _weat(query: WordSetQuery, lk: Node, lookup: LookupOptions, opts: WeatOptions, source: Source) -> Node:
    (t1, t2), (a, b) = query.target_sets.values(), query.attribute_sets.values()
    s = {"s1": weat_s_node(t1, a, b, lookup, source), "s2": weat_s_node(t2, a, b, lookup, source)}
    parents: dict[str, Any] = {"lookup": lk, **s, "effect_size": weat_effect_size_node(parents={"lookup": lk, **s})}
    if opts.calculate_p_value:
        parents["p_value"] = weat_p_value_node(parents={"lookup": lk, **s}, **opts.p_value.model_dump())
    return weat_node(parents=parents, return_effect_size=opts.return_effect_size)


def metric_node(name: str, query: WordSetQuery, lookup: LookupOptions, settings: MetricSettings,
                source: Source = "embeddings", lookup_parent: Node | None = None) -> Node:
    """One metric on one query (unnamed; ``query_nodes`` names it).

    ``lookup_parent`` is the query's lookup node when the caller has already built
    (and named) it; otherwise it is built here.
    """
    lk = lookup_parent or lookup_node(query, lookup, source)
    if name == "WEAT":
        return _weat(query, lk, lookup, settings.weat, source)
    parents = {"lookup": lk}
    if name == "RND":
        return rnd_node(parents=parents, **settings.rnd.model_dump())
    if name == "RNSB":
        return rnsb_node(parents=parents, **settings.rnsb.model_dump())
    if name == "RIPA":
        return ripa_node(parents=parents, **settings.ripa.model_dump())
    if name == "MAC":
        return mac_node(parents=parents)
    if name == "ECT":
        return ect_node(parents=parents)
    raise ValueError(f"unknown WEFE metric {name!r}; known: {', '.join(METRICS)}")


def fitting_metrics(template: tuple[int, int], metrics: Iterable[str] = METRICS) -> list[str]:
    """The metrics whose template accepts a query of this template, in WEFE's order."""
    out = []
    for m in metrics:
        try:
            check_template(m, "", template)
        except TemplateError:
            continue
        out.append(m)
    return out


def query_nodes(
    query_id: str,
    query: WordSetQuery | dict[str, Any],
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
    query = query if isinstance(query, WordSetQuery) else WordSetQuery.model_validate(query)
    lookup = lookup or LookupOptions()
    settings = settings or MetricSettings()
    where = f"{group}/{query_id}" if group else query_id
    if metrics is None:
        chosen = fitting_metrics(query.template)
        if not chosen:
            raise TemplateError(
                f"query {where!r} ('{query.query_name}', template {query.template}) fits no WEFE "
                f"metric: {', '.join(f'{m} {TEMPLATES[m]}' for m in METRICS)}"
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
