"""The planner: every vertex's model work checked against its backend, before any runs.

Why before: a server that gives only the chosen token's log-prob cannot compute Min-K%++;
finding that out after an hour of generation, or from a NaN in the report, is the failure
this module exists to prevent. Nothing is loaded and no request is sent: scorers declare
what they emit (``@metric(requests={"model": {"token_stats": ("logprob", "argmax")}})``),
metrics that read their ancestors' token statistics declare the fields they use
(``@metric(uses={"token_stats": ("mu", "var")})``), and backends declare their
:class:`~evaldag.engine.backend.Capabilities`.

A scorer vertex's needs are its own declaration plus every descendant's ``uses`` of a
kind it emits. A :class:`~evaldag.engine.backend.Routed` resource (``--model-arg fallback=hf:DIR``) serves a
vertex with its primary when the primary can, else with its fallback: all of one vertex's
requests go to one backend. A scorer whose readers differ (one metric needs a field only the
fallback has, the others do not) is served twice: the fallback's copy feeds only the readers
that need it (``_split``), so the primary's numbers stay the primary's. What no backend can serve is one :class:`PlanError` naming the
metrics, what is missing, what the backend gives and the way out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from .backend import ModelResource, Routed, declared_needs
from .graph import Graph, GraphError, Vertex


class PlanError(GraphError):
    """A vertex needs what its backend cannot give (one line: metrics, capability, way out)."""


@dataclass
class Plan:
    """Which backend serves each scorer vertex's model resources."""

    serving: dict[tuple[str, str], ModelResource] = field(default_factory=dict)  # (vertex key, run resource) -> backend
    labels: dict[str, dict[str, str]] = field(default_factory=dict)  # vertex key -> run resource -> backend label
    by_fallback: set[tuple[str, str]] = field(default_factory=set)  # (vertex key, run resource) its fallback serves

    def fingerprint(self, v: Vertex, run_name: str, fp: str) -> str:
        """The resource fingerprint ``v``'s node is keyed by: ``fp`` (a routed pair's is its
        primary's), except where the fallback serves ``v``: then the fallback's own key. The two
        backends give different fields (vLLM's token statistics carry no mu/var), so a node one
        computed is never reused where the planner chose the other."""
        chosen = self.serving.get((v.key, run_name))
        if chosen is None or (v.key, run_name) not in self.by_fallback:
            return fp
        key = chosen.fingerprint() + chosen.identity().digest()
        return key if key != fp else f"{key}~{chosen.identity().backend}"  # the same weights, another backend

    def resource(self, v: Vertex, run_name: str, model: Any) -> Any:
        """The backend that serves ``v``'s requests to ``run_name`` (``model`` when not planned)."""
        return self.serving.get((v.key, run_name), model)


def model_resources(resources: Any) -> dict[str, ModelResource]:
    """The run's model resources that follow the contract, read without loading anything."""
    out = {}
    for name, res in resources.supplied.items():
        if res.kind == "model" and isinstance(res.value(), ModelResource):
            out[name] = res.value()
    return out


def _needs(graph: Graph) -> dict[str, dict[str, dict[str, dict[str, set[str]]]]]:
    """scorer vertex key -> local resource -> kind -> metric name -> fields it needs."""
    out: dict[str, dict[str, dict[str, dict[str, set[str]]]]] = {}
    order = graph.order()
    for v in order:
        for res, kinds in declared_needs(v.metric.requests).items():
            for kind, fields in kinds.items():
                out.setdefault(v.key, {}).setdefault(res, {}).setdefault(kind, {}).setdefault(v.metric.name, set()).update(fields)
    for v in order:  # descendants' uses reach every ancestor scorer that emits the kind
        uses = declared_needs({"": v.metric.uses})[""] if v.metric.uses else {}
        if not uses:
            continue
        seen, stack = set(), list(v.parent_keys.values())
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            stack.extend(graph.vertices[k].parent_keys.values())
            for res, kinds in out.get(k, {}).items():
                for kind, fields in uses.items():
                    if kind in kinds:
                        kinds[kind].setdefault(v.metric.name, set()).update(fields)
    return out


def _uses_below(graph: Graph, key: str, kinds: Any) -> dict[str, set[str]]:
    """The fields of ``kinds`` that vertex ``key`` and everything below it declare they use."""
    out: dict[str, set[str]] = {}
    for k in {key} | nx.descendants(graph.nx, key):
        uses = graph.vertices[k].metric.uses
        for kind, fields in (declared_needs({"": uses})[""] if uses else {}).items():
            if kind in kinds:
                out.setdefault(kind, set()).update(fields)
    return out


def _split(graph: Graph, v: Vertex, local: str, run_name: str, model: Routed) -> str | None:
    """Serve scorer ``v`` twice when its primary can give some of its readers what they use and
    not others: the readers that need a fallback-only field (Min-K%++'s full-vocabulary
    statistics) move to a twin vertex the fallback serves, the rest stay with the primary. So one
    metric that needs the fallback does not move the numbers the primary can compute. Returns
    the twin's key, or None when every reader needs the fallback (nothing to keep)."""
    own = declared_needs(v.metric.requests).get(local, {})
    caps = model.primary.capabilities()
    if not own or any(caps.missing(kind, fields) is not None for kind, fields in own.items()):
        return None
    move = []
    for c in graph.nx.successors(v.key):
        below = _uses_below(graph, c, own)
        if any(caps.missing(kind, set(fields) | below.get(kind, set())) is not None for kind, fields in own.items()):
            move.append(c)
    if not move or (len(move) == graph.nx.out_degree(v.key) and not v.names):
        return None
    return graph.twin(v.key, f"fallback:{run_name}", move)


def _way_out(run_name: str, routed: bool) -> str:
    if routed:
        return "drop it, or give a fallback that serves it"
    return f"drop it, or add {fallback_arg(run_name)}"


def fallback_arg(run_name: str, value: str = "hf:DIR") -> str:
    """How a user gives the run resource ``run_name`` a fallback: ``--model-arg fallback=hf:DIR``
    for ``model``, ``--model-arg retain:fallback=hf:DIR`` for ``retain_model``."""
    role = run_name.removesuffix("_model") if run_name != "model" else ""
    return f"--model-arg {role + ':' if role else ''}fallback={value}"


def plan(graph: Graph, resources: Any) -> Plan:
    """Check every scorer vertex against its backends; return who serves what, or raise PlanError."""
    models = model_resources(resources)
    out, problems = Plan(), []
    for key, by_res in _needs(graph).items():
        v = graph.vertices[key]
        for local, kinds in by_res.items():
            run_name = v.bind.get(local, local)
            model = models.get(run_name)
            if model is None:
                continue
            candidates = [model.primary, model.fallback] if isinstance(model, Routed) else [model]
            chosen = next((c for c in candidates if all(
                c.capabilities().missing(kind, set().union(*by_metric.values())) is None
                for kind, by_metric in kinds.items())), None)
            if isinstance(model, Routed) and chosen is model.fallback and len(by_res) == 1:
                twin = _split(graph, v, local, run_name, model)
                if twin is not None:  # the primary keeps what it can give; the twin is the fallback's
                    out.serving[(key, run_name)], out.serving[(twin, run_name)] = model.primary, model.fallback
                    out.labels.setdefault(key, {})[run_name] = model.primary.label()
                    out.labels.setdefault(twin, {})[run_name] = model.fallback.label()
                    out.by_fallback.add((twin, run_name))
                    continue
            if chosen is not None:
                out.serving[(key, run_name)] = chosen
                if isinstance(model, Routed) and chosen is model.fallback:
                    out.by_fallback.add((key, run_name))
                out.labels.setdefault(key, {})[run_name] = chosen.label()
                continue
            last = candidates[-1]
            wants: dict[str, list[str]] = {}  # what is missing -> the metrics that need it
            for kind, by_metric in sorted(kinds.items()):
                for m, f in sorted(by_metric.items()):
                    what = last.capabilities().missing(kind, f)
                    if what:
                        wants.setdefault(what, []).append(m)
            clauses = [f"{', '.join(ms)} {'needs' if len(ms) == 1 else 'need'} {what}" for what, ms in wants.items()]
            them = "it" if sum(map(len, wants.values())) == 1 else "them"
            problems.append(f"{', '.join(clauses)}; {last.label()} gives {last.capabilities().gives()}: "
                            + _way_out(run_name, isinstance(model, Routed)).replace("drop it", f"drop {them}"))
    if problems:
        raise PlanError("; ".join(dict.fromkeys(problems)))
    return out
