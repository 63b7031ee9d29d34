"""Drawing metric graphs and runs: Mermaid, DOT, JSON, SVG, HTML, and the run report.

Every function takes whatever you have: a :class:`~evaldag.engine.Graph`, a list of
configured metrics, a :class:`~evaldag.engine.RunResult`, the ``--out`` folder of a
finished run, or a :class:`View` you built yourself::

    from evaldag.engine import render
    render.to_mermaid(nodes)                     # plan view, before any run
    render.to_html("evaldag-out")                # run view, from run.json
    render.build_report_html(["ckpt1", "ckpt2"], plugins=[...])   # the page's HTML

The package is a leaf: it imports nothing of the engine. It draws a :class:`View` (plain
data) and reads a finished run's files; a Graph, a RunResult or configured metrics are
turned into a View by ``engine/views.py``, which :func:`as_view` names by reference and
imports when it first needs it (``view.ENGINE_BUILDER``). It knows no benchmark either: the report page draws
the generic parts (metrics, graph, run statistics) and the :class:`Section` objects its
``plugins`` hand it; ``evaldag.engine.report.write_report_html`` passes the benchmarks
the runs ran and writes the file.
Nothing here needs a system binary or the network; the output is deterministic.
"""

from __future__ import annotations

import json
from typing import Any

from .dot import dot_to_svg, to_dot
from .html import to_html
from .clusters import Split
from .layout import count_crossings
from .mermaid import to_mermaid
from .report_html import ReportPlugin, RunFolder, Section, build_report_html, load_run_folder
from .svg import to_svg
from .view import EdgeView, NodeView, View, add_view_builder, as_view, from_run_dir

FORMATS = ("mermaid", "dot", "json", "svg", "html")


def _clean(x: Any) -> Any:
    """Strict JSON: NaN and infinities become null."""
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def to_json(source: Any, **view_kw: Any) -> str:
    """The view model as JSON (nodes, edges, counts, run facts) for other tools."""
    return json.dumps(_clean(as_view(source, **view_kw).to_dict()), indent=2, sort_keys=True, allow_nan=False) + "\n"


def render(source: Any, fmt: str, **view_kw: Any) -> str:
    """``fmt`` is one of :data:`FORMATS`."""
    funcs = {"mermaid": to_mermaid, "dot": to_dot, "json": to_json, "svg": to_svg, "html": to_html}
    if fmt not in funcs:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    return funcs[fmt](source, **view_kw)


__all__ = [
    "FORMATS", "EdgeView", "NodeView", "ReportPlugin", "RunFolder", "Section", "Split", "View",
    "add_view_builder", "as_view", "build_report_html", "count_crossings", "dot_to_svg", "from_run_dir",
    "load_run_folder", "render", "to_dot", "to_html", "to_json", "to_mermaid", "to_svg",
]
