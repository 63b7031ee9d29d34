"""The view model every renderer draws: one plain description of a metric graph.

Renderers never look at a :class:`~evaldag.engine.graph.Graph` or at ``run.json``
directly. They draw a :class:`View`, plain data built from either source:

* the *run view* of a finished run's files (:func:`from_run_dir`, here: ``run.json``
  read as untrusted input by ``runjson.py``): each node's status, seconds, recompute
  reason and headline value;
* the *plan view* of an engine ``Graph`` and the run view of a ``RunResult`` in memory,
  built outside ``render/`` (``engine/views.py``). :func:`as_view` names that builder by
  reference (:data:`ENGINE_BUILDER`, ``"module:function"``, as an entry point names a
  plugin) and imports it the first time it meets a source that is not a View, so this
  package imports nothing of the engine and nobody registers anything on import; a
  third party's builder is added with :func:`add_view_builder`.

Keeping one model means the Mermaid, DOT, SVG and HTML outputs always agree, and the
run report can draw runs written by another process (or another machine) from their
files alone.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Sequence

import networkx as nx

from .clusters import UNNAMED, Split, assign_clusters
from .merge import merge_same_work
from .runjson import STATUSES, read_run_json


@dataclass
class NodeView:
    """One box in the drawing. ``names`` holds every display name (several = shared)."""

    id: str
    key: str
    label: str
    names: list[str]
    metric: str
    kind: str  # scorer | aggregator | resource
    status: str
    params: dict = field(default_factory=dict)
    params_not_default: dict = field(default_factory=dict)  # only values that differ from the defaults
    group: str | None = None
    split: str | None = None
    seconds: float | None = None
    value: float | None = None
    reason: str = ""
    problem: str = ""  # why it failed or was skipped (one line)
    fingerprint: str | None = None
    version: str | None = None
    resources: dict = field(default_factory=dict)  # need -> bound resource name
    computed: dict = field(default_factory=dict)  # a cached node: when (at), seconds, reason, backend of its computation

    @property
    def shared(self) -> bool:
        return len(self.names) > 1

    @property
    def params_summary(self) -> str:
        """Non-default params as ``k=v`` pairs, short enough for a box."""
        parts = []
        for k, v in sorted(self.params_not_default.items()):
            if isinstance(v, dict):
                text = "{…}"
            elif isinstance(v, list):
                text = f"[{len(v)}]"
            else:
                text = str(v)
            parts.append(f"{k}={text if len(text) <= 18 else text[:17] + '…'}")
        out = ", ".join(parts)
        return out if len(out) <= 48 else out[:47] + "…"

    @property
    def unnamed(self) -> bool:
        return self.kind != "resource" and bool(UNNAMED.search(self.label))

    def display_names(self) -> list[str]:
        """Names to print: the metric for an unnamed node, else every name (own group implied)."""
        if self.unnamed:
            return [self.metric]
        own = f"{self.group}/" if self.group else None
        return [nm[len(own):] if own and nm.startswith(own) else nm for nm in self.names]

    def detail(self) -> str:
        """The small second line: metric (when it differs), changed params, renamed inputs."""
        if self.kind == "resource":
            return "" if self.metric == "resource" else self.metric
        parts = [self.metric] if not self.unnamed and self.metric != self.label else []
        if self.params_summary:
            parts.append(self.params_summary)
        parts += [f"{need}→{name}" for need, name in sorted(self.resources.items()) if need != name]
        if self.unnamed and not parts:  # tells same-metric intermediates apart, as in the table
            parts.append("#" + UNNAMED.search(self.label).group(0)[1:-1])
        return " · ".join(parts)

    def outcome(self) -> str:
        """Value, time and what happened, as far as known."""
        parts = [fmt_num(self.value)] if self.value is not None else []
        if self.status == "computed" and self.seconds is not None:
            parts.append(fmt_secs(self.seconds))
        if self.status in ("failed", "skipped"):
            parts.append(f"{self.status}: {self.problem}" if self.problem else self.status)
        elif self.status == "computed" and self.reason:
            parts.append(f"↻ {self.reason}")
        elif self.status == "cached" and self.computed:
            parts.append(f"cached: {computed_text(self.computed)}")
        return "  ·  ".join(parts)


@dataclass
class EdgeView:
    src: str
    dst: str
    keys: list[str]


@dataclass
class View:
    """Nodes in a deterministic (topological, then by label) order, edges, and run facts."""

    nodes: list[NodeView]
    edges: list[EdgeView]
    mode: str  # "plan" | "run"
    title: str = "evaldag graph"
    meta: dict = field(default_factory=dict)  # executor, wall_seconds, provenance (run view)
    splits: tuple[Split, ...] = ()  # the data-split names the bands use

    def node(self, node_id: str) -> NodeView:
        return self.index()[node_id]

    def index(self) -> dict[str, NodeView]:
        return {n.id: n for n in self.nodes}

    def to_nx(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.id)
        for e in self.edges:
            g.add_edge(e.src, e.dst, keys=e.keys)
        return g

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.status] = out.get(n.status, 0) + 1
        return {s: out[s] for s in STATUSES if s in out}

    def to_dict(self) -> dict:
        nodes = []
        for n in self.nodes:
            d = asdict(n)
            d["shared"] = n.shared
            nodes.append(d)
        return {"title": self.title, "mode": self.mode, "counts": self.counts(), "nodes": nodes,
                "edges": [asdict(e) for e in self.edges], "meta": self.meta}


# ---------------------------------------------------------------------- helpers
def fmt_num(x: float | None) -> str:
    """Four significant digits; NaN and infinities spelled out."""
    if x is None:
        return ""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:.4g}"


def computed_text(c: dict) -> str:
    """A cached node's origin in words: ``computed 2026-11-24 07:01 UTC in 0.52 s (new) by hf:…``."""
    parts = ["computed"]
    if c.get("at"):
        parts.append(str(c["at"]).replace("T", " ")[:16] + " UTC")
    if isinstance(c.get("seconds"), (int, float)):
        parts.append(f"in {fmt_secs(c['seconds'])}")
    if c.get("reason"):
        parts.append(f"({c['reason']})")
    if c.get("backend"):
        parts.append("by " + ", ".join(sorted(set(map(str, c["backend"].values())))))
    return " ".join(parts)


def fmt_secs(s: float | None) -> str:
    if s is None:
        return ""
    if s < 1:
        return f"{s * 1000:.0f} ms" if s >= 0.0005 else "<1 ms"
    return f"{s:.2f} s" if s < 60 else f"{s / 60:.1f} min"


def headline(value: Any) -> float | None:
    """The number a box shows: a Result's or dict's ``agg_value``, or a plain number."""
    agg = getattr(value, "agg_value", value)
    if isinstance(value, dict):
        agg = value.get("agg_value")
        if agg is None and "agg_value" in value and value.get("reason"):
            return math.nan  # a NaN as an EVAL file holds it: null, with its reason (NaN is not JSON)
    if isinstance(agg, bool) or not isinstance(agg, (int, float)):
        return None
    return float(agg)


def display_name(group: str | None, name: str) -> str:
    return f"{group}/{name}" if group else name


def finish_view(nodes: list[NodeView], edges: list[EdgeView], mode: str, title: str, meta: dict,
            splits: Sequence[Split] = ()) -> View:
    nodes, edges = merge_same_work(nodes, edges)
    view = View(nodes, edges, mode, title, meta, tuple(splits))
    assign_clusters(view)
    return view


# ---------------------------------------------------------------------- input nodes
def add_resource_nodes(nodes: list[NodeView], edges: list[EdgeView], providers: dict) -> None:
    """Input nodes for the resources the metrics read (and what providers derive them from)."""
    uses: dict[str, list[tuple[str, str]]] = {}
    for n in list(nodes):
        for need, name in sorted(n.resources.items()):
            uses.setdefault(name, []).append((n.id, need))
    todo = sorted(uses)
    seen: set[str] = set()
    while todo:  # providers' own inputs become resource nodes too
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        prov = providers.get(name)
        for need in getattr(prov, "needs", ()):
            uses.setdefault(need, []).append((f"res:{name}", need))
            todo.append(need)
    rid = {name: f"r{i}" for i, name in enumerate(sorted(uses))}
    for name in sorted(uses):
        prov = providers.get(name)
        nodes.append(NodeView(id=rid[name], key=f"resource:{name}", label=name, names=[name],
                              metric=f"provider {prov.name}" if prov else "resource", kind="resource",
                              status="input"))
        for target, need in uses[name]:
            dst = rid[target[4:]] if target.startswith("res:") else target
            edges.append(EdgeView(rid[name], dst, [need]))


# ---------------------------------------------------------------------- run view (from files)
def read_json(path: str | os.PathLike) -> Any:
    """JSON from us or open-unlearning (NaN/Infinity literals allowed)."""
    return json.loads(Path(path).read_text())


def read_evals(folder: Path) -> dict[str, dict]:
    """``{BENCH: contents of BENCH_EVAL.json}`` for every EVAL file in ``folder``."""
    out = {}
    for p in sorted(folder.glob("*_EVAL.json")):
        if not p.exists():  # a stable name the current set lacks (a dangling link reads as absent)
            continue
        data = read_json(p)
        if isinstance(data, dict):
            out[p.name[: -len("_EVAL.json")]] = data
    return out


def from_run_dir(folder: str | os.PathLike, *, show_resources: bool = False, title: str | None = None,
                 splits: Sequence[Split] = (), shown: str | os.PathLike | None = None) -> View:
    """The run view of a finished run's folder (``run.json`` plus its ``*_EVAL.json``).

    Files are read from ``folder``; the engine (``engine/views.py``) passes the folder of
    the run's published set, so every file comes from one set even while a run publishes
    the next, and the --out folder the user named as ``shown`` (messages)."""
    folder = Path(folder)
    if folder.is_file():
        folder = folder.parent
    given = Path(shown) / "run.json" if shown is not None else folder / "run.json"
    path = folder / "run.json"
    if not path.exists():
        raise FileNotFoundError(f"{given}: no run.json here (is {given.parent} the --out folder of a run?)")
    run = read_run_json(path)  # every field checked against its type; a bad one is dropped with a warning
    entries = run.get("nodes") or {}
    evals = read_evals(folder)
    only_bench = next(iter(evals)) if len(evals) == 1 else None
    g = nx.DiGraph()
    for name in sorted(entries):
        g.add_node(name)
    for name, e in sorted(entries.items()):
        for parent in (e.get("parents") or {}).values():
            if parent in entries:
                g.add_edge(parent, name)
    try:
        order = list(nx.lexicographical_topological_sort(g, key=lambda name: name.split("/", 1)[-1]))  # as Graph.order()
    except nx.NetworkXUnfeasible:
        cycle = [u for u, _ in nx.find_cycle(g)]
        raise ValueError(f"{path}: the nodes' parents form a cycle ({' -> '.join(json.dumps(c) for c in cycle[:6])})") from None
    ids = {name: f"n{i}" for i, name in enumerate(order)}
    nodes, edges = [], []
    for name in order:
        e = entries[name]
        group, bare = name.split("/", 1) if "/" in name else (None, name)
        if group is None and only_bench and not UNNAMED.search(name):
            group = only_bench
        names = list(e.get("names") or [display_name(group, bare)])
        params = e.get("params") or {}
        nodes.append(NodeView(
            id=ids[name], key=name, label=bare, names=names, metric=e.get("metric", bare),
            kind=e.get("kind", "aggregator"), status=e.get("status", "planned"), params=params,
            # params_changed: the key's name in run.json files written before the rename
            params_not_default=e.get("params_not_default", e.get("params_changed", params)), group=group,
            seconds=e.get("seconds") if e.get("status") in ("computed", "failed") else None,
            value=_eval_value(evals, group, bare), reason=e.get("reason", ""),
            problem=(e.get("error") or "").strip().splitlines()[-1] if (e.get("error") or "").strip() else "",
            fingerprint=e.get("fingerprint"), version=e.get("version"), resources=dict(e.get("resources") or {}),
            computed=dict(e.get("computed") or {}) if e.get("status") == "cached" else {}))
        by_parent: dict[str, list[str]] = {}
        for k, parent in (e.get("parents") or {}).items():
            if parent in ids:
                by_parent.setdefault(parent, []).append(k)
        edges += [EdgeView(ids[p], ids[name], sorted(ks)) for p, ks in by_parent.items()]
    if show_resources:
        add_resource_nodes(nodes, edges, {})
    meta = {k: run.get(k) for k in ("executor", "wall_seconds", "provenance") if k in run}
    # titled after the folder the user named, not the id of the set its files are read from
    return finish_view(nodes, edges, "run", title or f"evaldag run: {given.parent.name}", meta, splits)


def _eval_value(evals: dict[str, dict], group: str | None, name: str) -> float | None:
    benches = [group] if group in evals else sorted(evals)
    for b in benches:
        if name in evals[b]:
            return headline(evals[b][name])
    return None


# ---------------------------------------------------------------------- dispatch
#: the engine's builder of a View from a Graph, a RunResult, configured metrics or a run folder
#: (read from its published set), imported the first time :func:`as_view` needs a builder
ENGINE_BUILDER = "evaldag.engine.views:view_of"
#: builders of a View from other objects, in order; each returns None for a source it does not know
_BUILDERS: list[Callable[..., "View | None"]] = []


def _builders() -> list[Callable[..., "View | None"]]:
    module, _, name = ENGINE_BUILDER.partition(":")
    try:
        engine = getattr(import_module(module), name)
    except ImportError:  # render/ on its own: it draws Views and run folders
        return _BUILDERS
    return [engine, *(b for b in _BUILDERS if b is not engine)]


def add_view_builder(builder: Callable[..., "View | None"]) -> None:
    """Let :func:`as_view` draw more kinds of source: ``builder(source, store=..., **kw)``
    returns a :class:`View`, or None for a source it does not know."""
    if builder not in _BUILDERS:
        _BUILDERS.append(builder)


def as_view(source: Any, *, store: Any = None, show_resources: bool = False, title: str | None = None,
            splits: Sequence[Split] | None = None) -> View:
    """Anything drawable -> View: a View, a run folder, or what a builder knows (the engine's:
    a Graph, a RunResult, configured metrics).

    ``splits``: the data-split names the bands use; None: the engine's builder takes those of
    the benchmarks the source ran (``Benchmark.splits``), and without it there are no split bands.
    """
    kw = dict(show_resources=show_resources, title=title, splits=splits)
    if isinstance(source, View):
        return source
    for builder in _builders():  # the engine's first: a run folder read from its published set
        view = builder(source, store=store, **kw)
        if view is not None:
            return view
    if isinstance(source, (str, os.PathLike)):
        return from_run_dir(source, **{**kw, "splits": splits or ()})
    raise TypeError(f"cannot draw {type(source).__name__}: give a Graph, a RunResult, a run folder or metrics")
