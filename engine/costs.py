"""A run's model work counted before any of it is done: the plan with its cost.

Each scorer is started just far enough to yield its first requests: it reads its data and its
model's tokenizer, never the weights. Per model and request kind: how many sequences, how many
tokens, how many new tokens generation may add, how many backward passes, and which metrics need
them. A long run says up front what it will cost (``evaldag run ... --plan-only`` prints this and
exits), instead of a user finding out two hours into GradNorm.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from .graph import Graph, Vertex
from .resources import ResourceSet
from .scorers import route


@dataclass
class KindCost:
    """One model's requests of one kind, as the scorers first ask for them."""

    model: str
    kind: str
    rank: int = 0  # the kind's Request.cost_rank: the order the run serves kinds in
    sequences: int = 0
    tokens: int = 0
    new_tokens: int = 0  # generation: the most it may add (max new tokens per row)
    backward: int = 0  # gradient kinds: one backward pass per row, at most
    metrics: set[str] = field(default_factory=set)


def plan_costs(graph: Graph, rs: ResourceSet, prefix_sharing: bool = False,
               batch_tokens: int | None = None) -> tuple[list[KindCost], list[str]]:
    """The first round of every scorer, counted per (model, kind); and the scorers whose work
    cannot be counted before running (their requests depend on their parents' values). A missing
    resource is refused first, naming the metrics that need it (as the run refuses it).

    A request several scorers ask for counts once (the executor serves it once), and the tokens
    are those the model's backend will forward (``ModelResource.planned_tokens``): with
    ``prefix_sharing`` (the run's setting) a question's context once for all its answers."""
    graph.check_resources(rs)
    costs: dict[tuple[str, str], KindCost] = {}
    asked: dict[tuple[str, str], dict] = {}  # (model, kind) -> {request: None}, the distinct ones in order
    served_by: dict[str, Any] = {}  # model -> its resource
    uncounted = []
    roots = set(graph.roots)
    for v in graph.order():
        if not v.metric.scorer:
            continue
        if v.parent_keys:
            uncounted.append(v.label)
            continue
        reqs = _first_requests(v, rs)
        named = sorted(graph.vertices[k].label for k in (nx.descendants(graph.nx, v.key) | {v.key}) & roots)
        for res, req in reqs:
            run_name = v.bind.get(res, res)
            model = _describe(rs, run_name)
            c = costs.setdefault((model, req.kind), KindCost(model, req.kind, type(req).cost_rank))
            c.metrics.update(named)
            seen = asked.setdefault((model, req.kind), {})
            key = _key(req)
            if key in seen:
                continue
            seen[key] = req
            served_by.setdefault(model, rs.get(run_name, v.label).value())
            c.sequences += 1
            c.new_tokens += int(getattr(getattr(req, "settings", None), "max_new_tokens", 0) or 0)
            c.backward += 1 if type(req).cost_rank >= 2 else 0
    for (model, kind), c in costs.items():
        reqs = list(asked[(model, kind)].values())
        planned = getattr(served_by[model], "planned_tokens", None)
        c.tokens = planned(kind, reqs, prefix_sharing, batch_tokens) if planned else sum(r.length() for r in reqs)
    return sorted(costs.values(), key=lambda c: (c.model, c.rank, c.kind)), uncounted


def _key(req: Any) -> Any:
    """A request as the executor tells two apart (equal fields: one request); an unhashable one alone."""
    try:
        hash(req)
    except TypeError:
        return id(req)
    return req


def _first_requests(v: Vertex, rs: ResourceSet) -> list:
    inputs = {need: rs.get(name, v.label).value() for need, name in v.resources.items()}
    gen = v.metric.fn(**inputs, **({"params": v.node.params} if "params" in _arguments(v) else {}))
    try:
        first = next(gen)
    except StopIteration:
        return []
    finally:
        gen.close()
    return [route(x, v) for x in first]


def _arguments(v: Vertex) -> set[str]:
    return set(inspect.signature(v.metric.fn).parameters)


def _describe(rs: ResourceSet, name: str) -> str:
    d = rs.described({name: name}).get(name) or {}
    return f"{name} ({d.get('path') or d.get('spec') or d.get('source') or d.get('type', '?')})"


def format_plan(costs: list[KindCost], uncounted: list[str]) -> list[str]:
    """The plan as lines: per model, each kind's sequences, tokens, new tokens, backward passes,
    and the metrics that need it (cheapest kinds first, the order the run serves them)."""
    lines = []
    for model in dict.fromkeys(c.model for c in costs):
        lines.append(f"plan: model work on {model}, served cheapest kind first:")
        for c in (c for c in costs if c.model == model):
            what = [f"{c.sequences} sequences", f"{c.tokens} tokens"]
            if c.new_tokens:
                what.append(f"up to {c.new_tokens} new tokens")
            if c.backward:
                what.append(f"{c.backward} backward passes")
            names = sorted(c.metrics)
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            lines.append(f"  {c.kind:12s} {', '.join(what)}; for {shown}")
    if uncounted:
        lines.append(f"plan: not counted before running (they ask after their parents): {', '.join(uncounted)}")
    if not costs and not uncounted:
        lines.append("plan: no model work")
    lines.append("plan: before the cache; answers already stored are not asked again")
    return lines
