"""Building the metric graph: expand parents, validate, merge identical work.

Every configured :class:`~evaldag.engine.declare.Node` becomes a vertex of a
``networkx.DiGraph`` keyed by its *structural key*: metric, version, params, parents'
keys and the resource names it reads (after ``bind``). Two requests for the same thing,
from two metrics or two benchmarks, land on one vertex. When resources are bound, each
vertex also gets its *fingerprint* (the structural key with resource names replaced by
resource fingerprints), which is what the store is keyed by.

Everything that can be wrong with a graph is found here, before any model loads: an
unknown parent, a cycle (every node on it is named), a missing resource (and who
needs it), two different configurations under one display name, one name given both to a
group's metric and to a different ungrouped one (an added metric named like a benchmark's:
a plain name would find either).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import networkx as nx

from .declare import REGISTRY, DeclarationError, MetricDef, Node, Registry, check_inputs, origin
from .fingerprint import canonical_params, components, digest, hash_value
from .hooks import display


class GraphError(ValueError):
    """The graph cannot be built as declared; the message names the culprit."""


@dataclass
class Vertex:
    """One unit of work in the graph."""

    key: str
    node: Node
    bind: dict[str, str]  # resource as the function sees it -> resource name in the run
    parent_keys: dict[str, str]  # access key -> parent vertex key
    names: list[tuple[str | None, str]] = field(default_factory=list)  # (group, display name)
    fingerprint: str | None = None
    components: dict | None = None

    @property
    def metric(self) -> MetricDef:
        return self.node.metric

    @property
    def label(self) -> str:
        """A readable name: the first display name, else metric[params-hash]."""
        if self.names:
            return self.names[0][1]
        return f"{self.metric.name}[{self.key[:6]}]"

    @property
    def resources(self) -> dict[str, str]:
        return {need: self.bind.get(need, need) for need in self.metric.needs}


def _describe(v: Vertex) -> str:
    """metric(params) and, when it reads renamed resources, its binding: how two configurations differ."""
    renamed = {local: outer for local, outer in sorted(v.bind.items()) if local != outer}
    return f"{v.metric.name}({v.node.params.model_dump()}" + (f", bind={renamed}" if renamed else "") + ")"


def _origin(v: Vertex) -> str:
    return f"metric {v.metric.name!r} of {origin(v.metric.fn)}"


def _compose(inherited: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """The bind a parent sees: its own renames, looked up through its child's."""
    out = dict(inherited)
    for local, outer in own.items():
        out[local] = inherited.get(outer, outer)
    return out


@dataclass
class _Frame:
    """One node being expanded: what it inherits, its parents still to visit, their keys so far."""

    node: Node
    inherited: Mapping[str, str]
    group: str | None
    bind: dict[str, str]
    me: str
    ident: tuple
    todo: list[tuple[str, Any]]  # (access key, parent spec), in key order
    parent_keys: dict[str, str] = field(default_factory=dict)


class Graph:
    """The expanded, validated, merged graph of a set of requested metrics."""

    def _repr_svg_(self) -> str:
        """Jupyter's picture of the graph: its DAG, the SVG ``evaldag graph`` writes (``notebook.py``)."""
        return display("graph_svg", self)

    def __init__(self, nodes: Iterable[Node], registry: Registry = REGISTRY):
        self.registry = registry
        self.nx = nx.DiGraph()
        self.vertices: dict[str, Vertex] = {}
        self.roots: list[str] = []
        self._names: dict[tuple[str | None, str], str] = {}
        self._by_name: dict[str, dict[str | None, str]] = {}  # display name -> group -> vertex key
        self.groups: list[str | None] = []
        for node in nodes:
            if not isinstance(node, Node):
                raise GraphError(f"expected a configured metric (Node), got {node!r}")
            key = self._expand(node, node.group)
            if key not in self.roots:
                self.roots.append(key)
        try:
            cycle = nx.find_cycle(self.nx)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:  # pragma: no cover - _expand catches cycles first; kept as a guard
            raise GraphError("cycle: " + " -> ".join(self.vertices[u].label for u, _ in cycle))

    # ------------------------------------------------------------------ building
    def _resolve(self, spec: Any, asked_by: str, key: str) -> Node:
        if isinstance(spec, Node):
            return spec
        if isinstance(spec, MetricDef):
            return spec()
        if isinstance(spec, str):
            m = self.registry.get(spec)
            if m is None:
                raise GraphError(f"unknown parent {spec!r} (asked by {asked_by} as {key!r})")
            return m()
        raise GraphError(f"parent {key!r} of {asked_by} must be a metric name or a configured metric, got {spec!r}")

    def _enter(self, node: Node, inherited: Mapping[str, str], group: str | None, path: list, on_path: set) -> "_Frame":
        """Start expanding ``node``: its bind, its parents to visit, and a cycle check against the path."""
        bind = _compose(inherited, node.bind)
        group = node.group or group
        me = node.name or node.metric.name
        ident = (node.metric.name, node.params.model_dump_json(), json.dumps(sorted(bind.items())))
        if ident in on_path:
            idents = [p[0] for p in path]
            names = [p[1] for p in path[idents.index(ident):]] + [me]
            raise GraphError("cycle in metric parents: " + " -> ".join(names))
        path.append((ident, me))
        on_path.add(ident)
        parents = node.resolved_parents()
        try:
            check_inputs(node.metric.fn, set(parents) | set(node.metric.needs), me)
        except DeclarationError as e:
            raise GraphError(str(e)) from None
        return _Frame(node, inherited, group, bind, me, ident, sorted(parents.items()))

    def _expand(self, root: Node, group: str | None) -> str:
        """Expand ``root`` and its ancestors depth first; returns its vertex key.

        An explicit stack, not recursion: a graph built in Python may be a chain of any
        length (10,000 nodes is tested), and Python's recursion limit is about 1,000 frames.
        Parents are visited in key order and vertices are added after their parents, as
        the recursive version did, so keys, names and order are unchanged.
        """
        path: list[tuple] = []  # (ident, display name) from the root down: the cycle message
        on_path: set = set()
        frames = [self._enter(root, {}, group, path, on_path)]
        while True:
            f = frames[-1]
            if len(f.parent_keys) < len(f.todo):
                k, spec = f.todo[len(f.parent_keys)]
                frames.append(self._enter(self._resolve(spec, f.me, k), f.bind, f.group, path, on_path))
                continue
            key = self._finish(f)
            frames.pop()
            path.pop()
            on_path.discard(f.ident)
            if not frames:
                return key
            up = frames[-1]
            up.parent_keys[up.todo[len(up.parent_keys)][0]] = key

    def _finish(self, f: "_Frame") -> str:
        """The vertex of a node whose parents all have keys: merged by structural key, then named."""
        node, bind, parent_keys = f.node, f.bind, f.parent_keys
        resources = {need: bind.get(need, need) for need in node.metric.needs}
        key = hash_value(
            {
                "metric": node.metric.name,
                "version": node.metric.version,
                "params": canonical_params(node.params),
                "parents": parent_keys,
                "resources": resources,
            }
        )
        v = self.vertices.get(key)
        if v is None:
            v = Vertex(key, node, bind, parent_keys)
            self.vertices[key] = v
            self.nx.add_node(key, vertex=v)
            for k, pk in parent_keys.items():
                if self.nx.has_edge(pk, key):
                    self.nx.edges[pk, key]["keys"].append(k)
                else:
                    self.nx.add_edge(pk, key, keys=[k])
        if node.name:
            # a named node reached through a renaming parent (e.g. the retain-model side of
            # forget quality) is other work than the node under its own name: qualify it
            # (a qualifier the name already carries, e.g. from with_bind, is not repeated)
            renamed = sorted({outer for local, outer in f.inherited.items() if local != outer} - set(node.name.split("@")[1:]))
            self._name(v, f.group, node.name + "".join(f"@{r}" for r in renamed))
        return key

    def _name(self, v: Vertex, group: str | None, name: str) -> None:
        other = self._names.get((group, name))
        if other is not None and other != v.key:
            where = f"{group}/{name}" if group else name
            raise GraphError(
                f"two different configurations under one display name {where!r}: "
                f"{_describe(self.vertices[other])} vs {_describe(v)}"
            )
        self._one_metric_per_name(v, group, name)
        self._names[(group, name)] = v.key
        self._by_name.setdefault(name, {})[group] = v.key
        if (group, name) not in v.names:
            v.names.append((group, name))
        if group not in self.groups:
            self.groups.append(group)

    def _one_metric_per_name(self, v: Vertex, group: str | None, name: str) -> None:
        """An ungrouped name that a group's different metric also has is refused: the plain
        name (``find``, RUN_EVAL.json, run.json) would reach one of them for both."""
        for g, key in self._by_name.get(name, {}).items():
            if key != v.key and (g is None) != (group is None):
                mine, theirs = (v, group), (self.vertices[key], g)
                grouped, plain = (mine, theirs) if group is not None else (theirs, mine)
                raise GraphError(f"two metrics named {name!r} in one run: {grouped[1]}'s ({_origin(grouped[0])}) and an "
                                 f"ungrouped one ({_origin(plain[0])}); the one name would show one value for both: "
                                 "rename the ungrouped one")

    def twin(self, key: str, tag: str, children: Iterable[str]) -> str:
        """A copy of vertex ``key`` (same metric, params, parents; no display name) that ``children``
        read instead of it; returns the copy's key (the same on every call with these arguments).

        The planner uses it to serve one scorer's work twice: by the primary backend for the
        metrics it can give, by a fallback (``--model-arg fallback=``) for the ones that need what only the fallback has.
        """
        v = self.vertices[key]
        new = hash_value({"twin": key, "tag": tag})
        if new not in self.vertices:
            self.vertices[new] = Vertex(new, v.node, v.bind, dict(v.parent_keys))
            self.nx.add_node(new, vertex=self.vertices[new])
            for pk in set(v.parent_keys.values()):
                self.nx.add_edge(pk, new, keys=list(self.nx.edges[pk, key]["keys"]))
        for c in children:
            keys = self.nx.edges[key, c]["keys"]
            self.nx.remove_edge(key, c)
            self.nx.add_edge(new, c, keys=keys)
            cv = self.vertices[c]
            cv.parent_keys = {k: new if pk == key else pk for k, pk in cv.parent_keys.items()}
        return new

    # ------------------------------------------------------------------ queries
    def order(self) -> list[Vertex]:
        return [self.vertices[k] for k in nx.lexicographical_topological_sort(self.nx, key=lambda k: self.vertices[k].label)]

    def find(self, name: str) -> Vertex:
        """A vertex by display name (``group/name`` or ``name``), label, key or fingerprint prefix."""
        for (group, n), key in self._names.items():
            if name in (n, f"{group}/{n}"):
                return self.vertices[key]
        for v in self.vertices.values():
            if name == v.label or v.key.startswith(name) or (v.fingerprint or "").startswith(name):
                return v
        labelled = sorted(v.label for v in self.vertices.values() if v.label.startswith(f"{name}["))
        if labelled:  # an unnamed node is known by its label, the metric's name and a short hash
            raise KeyError(f"no node named {name!r}: an unnamed node is found by its label ({', '.join(labelled)}); "
                           f"give it a name to use {name!r}: {name}(..., name={name!r}) or node.named({name!r})")
        raise KeyError(f"no node named {name!r}")

    def required_resources(self) -> dict[str, list[str]]:
        """Resource name in the run -> labels of the vertices that read it."""
        need: dict[str, list[str]] = {}
        for v in self.order():
            for res in v.resources.values():
                need.setdefault(res, []).append(v.label)
        return need

    def _metrics_of(self, labels: list[str]) -> list[str]:
        """The named metrics (what the user asked for: ``mia_reference``) that read through the
        vertices ``labels``, rather than internal nodes like ``qa_stats[6d8a98]``; the labels
        themselves when no named vertex depends on them."""
        keys = [v.key for v in self.order() if v.label in labels]
        reach = set(keys).union(*(nx.descendants(self.nx, k) for k in keys))
        named = [v.label for v in self.order() if v.key in reach and v.names]
        return named or labels

    # ------------------------------------------------------------------ fingerprints
    def check_resources(self, resources: Any) -> None:
        missing = {r: self._metrics_of(who) for r, who in self.required_resources().items() if not resources.has(r)}
        if missing:
            lines = [f"{r!r} (needed by {', '.join(who[:5])}{' …' if len(who) > 5 else ''})" for r, who in sorted(missing.items())]
            raise GraphError("missing resource(s): " + "; ".join(lines))

    def fingerprint(self, resources: Any, execution: str | None = None, served: Any = None) -> None:
        """Give every vertex its fingerprint from the bound resources' fingerprints.

        ``execution`` marks the scorers' fingerprints (``"deterministic"``); their descendants follow.
        ``served`` (the planner's Plan) keys a fallback pair's vertex by the backend serving it.
        """
        self.check_resources(resources)
        for v in self.order():
            res_fps = {need: resources.get(name, v.label).fingerprint() for need, name in v.resources.items()}
            if served is not None:
                res_fps = {need: served.fingerprint(v, v.resources[need], fp) for need, fp in res_fps.items()}
            par_fps = {k: self.vertices[pk].fingerprint for k, pk in v.parent_keys.items()}
            v.components = components(v.metric.name, v.metric.version, canonical_params(v.node.params), par_fps, res_fps,
                                      code=v.metric.code, execution=execution if v.metric.scorer else None)
            v.fingerprint = digest(v.components)

    def explain(self, name: str) -> dict:
        """What a node's fingerprint is made of (call after :meth:`fingerprint`)."""
        v = self.find(name)
        return {
            "name": v.label,
            "fingerprint": v.fingerprint,
            "metric": v.metric.name,
            "version": v.metric.version,
            "code": v.metric.code,
            "params": canonical_params(v.node.params),
            "parents": {k: {"node": self.vertices[pk].label, "fingerprint": self.vertices[pk].fingerprint} for k, pk in v.parent_keys.items()},
            "resources": {need: {"bound_to": name, "fingerprint": (v.components or {}).get("resources", {}).get(need)} for need, name in v.resources.items()},
        }

    def __len__(self) -> int:
        return len(self.vertices)

