"""Views of the engine's own objects: the plan of a :class:`Graph` and the run of a
:class:`RunResult`, as the plain :class:`~evaldag.engine.render.view.View` that ``render/``
draws.

``render/`` is a leaf: it draws a View and reads a finished run's files, and imports
nothing of the engine. What needs the engine (a graph's vertices, a node store to say
which nodes are cached, a result's records and loaded values) is read here. ``render.as_view``
names :func:`view_of` by reference (``render.view.ENGINE_BUILDER``) and imports this module
the first time it draws something that is not a View, so ``render.to_mermaid(nodes)`` draws
a Graph, a RunResult or configured metrics without this module registering itself on import.

The bands by data split use the words of the benchmarks the source ran (``Benchmark.splits``:
a run folder's ``run.json`` names them; a Graph or a RunResult, by its groups, ``TOFU`` ->
tofu's), unless ``splits`` is given; the engine itself knows no split word.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from .cache import Cache
from .export import splits_for
from .graph import Graph
from .outfolder import set_folder
from .render.clusters import Split
from .render.view import (EdgeView, NodeView, View, add_resource_nodes, display_name, finish_view,
                          from_run_dir, headline)
from .report import benchmarks_of, runs_of, splits_of
from .results import RunResult


def _graph_splits(graph: Any, splits: Sequence[Split] | None) -> Sequence[Split]:
    """``splits``, else those of the benchmarks whose groups the graph names (as ``export`` guesses them)."""
    if splits is not None:
        return splits
    return splits_for(g.lower() for g in getattr(graph, "groups", ()) if g)


def _folder_splits(folders: Sequence[str | os.PathLike], splits: Sequence[Split] | None) -> Sequence[Split]:
    """``splits``, else those of the benchmarks the run folders ran (run.json, else their EVAL files)."""
    if splits is not None:
        return splits
    try:
        return splits_of(benchmarks_of(runs_of(folders)))
    except (OSError, ValueError):  # a folder that is not a run: from_run_dir says what is wrong
        return ()


def from_graph(graph: Any, *, store: Any = None, records: dict | None = None, values: dict | None = None,
               show_resources: bool = False, title: str | None = None, meta: dict | None = None,
               splits: Sequence[Split] | None = None) -> View:
    """A view of an engine Graph: the plan, or a run when ``records``/``values`` are given.

    ``store`` (a Store or a folder) marks nodes whose fingerprint it already holds as
    ``cached``; that needs fingerprints, i.e. ``graph.fingerprint(resources)`` first.
    """
    if store is not None and not hasattr(store, "has"):
        store = Cache(store).nodes
    order = graph.order()
    ids = {v.key: f"n{i}" for i, v in enumerate(order)}
    nodes, edges = [], []
    for v in order:
        rec = (records or {}).get(v.key)
        if rec is not None:
            status, reason, problem, computed = rec.status, rec.reason, rec.problem, dict(rec.origin)
            # a cached node took no time; 6 decimals as run.json keeps them, so both views agree
            seconds = round(rec.seconds, 6) if rec.status in ("computed", "failed") else None
        else:
            held = store is not None and v.fingerprint is not None and store.has(v.fingerprint)
            status, seconds, reason, problem, computed = ("cached" if held else "planned"), None, "", "", {}
        names = [display_name(g, n) for g, n in v.names]
        p = v.node.params
        nodes.append(NodeView(
            id=ids[v.key], key=v.key, label=v.label, names=names or [v.label], metric=v.metric.name,
            kind=v.metric.kind, status=status, params=p.model_dump(mode="json"),
            params_not_default=p.model_dump(mode="json", exclude_defaults=True),
            group=v.names[0][0] if v.names else None, seconds=seconds,
            value=headline((values or {}).get(v.key)), reason=reason, problem=problem, fingerprint=v.fingerprint,
            version=v.metric.version, resources=dict(v.resources), computed=computed))
        by_parent: dict[str, list[str]] = {}
        for k, pk in v.parent_keys.items():
            by_parent.setdefault(pk, []).append(k)
        edges += [EdgeView(ids[pk], ids[v.key], sorted(ks)) for pk, ks in by_parent.items()]
    if show_resources:
        providers = getattr(getattr(graph, "registry", None), "providers", {}) or {}
        add_resource_nodes(nodes, edges, providers)
    mode = "run" if records else "plan"
    return finish_view(nodes, edges, mode, title or f"evaldag {mode}", meta or {}, _graph_splits(graph, splits))


def from_run_result(result: Any, *, show_resources: bool = False, title: str | None = None,
                    splits: Sequence[Split] | None = None) -> View:
    """The run view of a RunResult still in memory (values read from the store if needed)."""
    values = {}
    for v in result.graph.order():
        rec = result.records.get(v.key)
        if v.names and rec is not None and rec.status in ("computed", "cached"):
            if v.key in result.loaded:
                values[v.key] = result.loaded[v.key]
            else:
                entry = result.cache.nodes.get(v.fingerprint)
                values[v.key] = entry.value if entry is not None else None
    meta = {"executor": result.executor, "wall_seconds": result.wall_seconds, "provenance": result.provenance}
    return from_graph(result.graph, records=result.records, values=values, show_resources=show_resources,
                      title=title or "evaldag run", meta=meta, splits=splits)


def run_dir_view(folder: str | os.PathLike, **kw: Any) -> View:
    """The run view of an --out folder, every file read from its published set (never a mix
    of two runs, even while a run publishes the next)."""
    given = Path(folder)
    given = given.parent if given.is_file() else given  # run.json itself
    kw["splits"] = _folder_splits([given], kw.get("splits"))
    return from_run_dir(set_folder(given), shown=given, **kw)


def runs_view(runs: Sequence[tuple[str, Path]], *, show_resources: bool = False, title: str | None = None,
              splits: Sequence[Split] | None = None) -> View:
    """Several runs as one picture (a sweep's OUT): each checkpoint's nodes named after it,
    and the work they share (the retain model's, computed once and cached for the others:
    one fingerprint) drawn once, in the shared band."""
    splits = _folder_splits([folder for _, folder in runs], splits)
    if len(runs) == 1:
        return run_dir_view(runs[0][1], show_resources=show_resources, title=title, splits=splits)
    nodes: list[NodeView] = []
    edges: list[EdgeView] = []
    for i, (name, folder) in enumerate(runs):
        one = run_dir_view(folder, show_resources=show_resources, splits=splits)
        for n in one.nodes:
            n.id = f"c{i}{n.id}"
            n.names = [f"{name}: {nm}" for nm in n.names]
            n.group = f"{name}: {n.group}" if n.group else name
        nodes += one.nodes
        edges += [EdgeView(f"c{i}{e.src}", f"c{i}{e.dst}", e.keys) for e in one.edges]
    return finish_view(nodes, edges, "run", title or f"evaldag sweep: {', '.join(n for n, _ in runs)}", {}, splits)


def view_of(source: Any, *, store: Any = None, show_resources: bool = False, title: str | None = None,
            splits: Sequence[Split] | None = None) -> View | None:
    """A RunResult, a Graph or configured metrics as a View; None for anything else."""
    kw = dict(show_resources=show_resources, title=title, splits=splits)
    if isinstance(source, (str, os.PathLike)):
        return run_dir_view(source, **kw)
    if isinstance(source, RunResult):
        return from_run_result(source, **kw)
    if isinstance(source, Graph):
        return from_graph(source, store=store, **kw)
    if isinstance(source, Iterable) and not isinstance(source, (str, bytes, dict)):
        return from_graph(Graph(list(source)), store=store, **kw)
    return None


__all__ = ["from_graph", "from_run_result", "run_dir_view", "runs_view", "view_of"]
