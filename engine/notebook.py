"""How the engine's objects show themselves in a notebook (Jupyter's ``_repr_html_`` / ``_repr_svg_``).

Why a module of its own: ``Graph`` and ``RunResult`` must not import the renderer (the core
knows nothing of drawing, and ``render/`` must not be imported back into the modules it
draws), yet a researcher who ends a cell with ``result`` expects a picture, not 16,000
characters of arrays. So each class declares its display methods in its own body, and they
call :func:`evaldag.engine.hooks.display`, whose table (``hooks.DISPLAY``) names the functions
below by reference: this module, and the renderer with it, is imported the first time a
notebook shows an object, and importing ``evaldag.engine`` attaches and registers nothing.
The drawing is the same SVG ``evaldag graph`` writes (statuses and values on the boxes).

* ``Graph._repr_svg_``: its DAG (:func:`graph_svg`);
* ``RunResult._repr_html_``: a one-line status, the metrics table (group, metric, value,
  status, reason) and the DAG with statuses (:func:`run_result_html`);
* ``Result._repr_html_``: its value, reason, the number of items and the extra keys;
* ``Benchmark._repr_html_``: the plan of its default config, drawn (``Graph(bench.plan(cfg))``
  draws another config's plan);
* ``RunResult.to_pandas()``: the long table of :mod:`evaldag.engine.export`, reached the same
  way (results.py must not import the export, which reads the benchmarks).
"""

from __future__ import annotations

import html
import math
from typing import Any

from .benchmark import Benchmark
from .export import result_rows, to_frame
from .graph import Graph
from .render.svg import to_svg
from .results import Result, RunResult


def _num(v: Any) -> str:
    if isinstance(v, Result):
        v = v.agg_value
    if isinstance(v, bool) or v is None:
        return html.escape(str(v))
    if isinstance(v, (int, float)):
        return "NaN" if isinstance(v, float) and math.isnan(v) else f"{v:.6g}"
    return html.escape(type(v).__name__)


def graph_svg(graph: Any) -> str:
    return to_svg(graph, standalone=True)


def result_html(r: Result) -> str:
    rows = [("agg_value", _num(r.agg_value))]
    if r.value_by_index is not None:
        rows.append(("items", str(len(r.value_by_index))))
    rows += [(html.escape(str(k)), _num(v) if isinstance(v, (int, float, type(None))) else html.escape(type(v).__name__))
             for k, v in r.extra.items()]
    if r.reason:
        rows.append(("reason", html.escape(r.reason)))
    body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table class='evaldag-result'>{body}</table>"


def metrics_rows(result: RunResult) -> list[tuple[str, str, Any, str, str]]:
    """(group, name, value, status, reason or problem) for every named node."""
    out = []
    for v in result.graph.order():
        rec = result.records.get(v.key)
        for g, n in v.names:
            status = rec.status if rec else "not run"
            value = result.value(f"{g}/{n}" if g else n) if status in ("computed", "cached") else None
            why = (rec.problem or rec.reason) if rec else ""
            if isinstance(value, Result) and value.reason:
                why = value.reason
            out.append((g or "", n, value, status, why))
    return out


def run_result_html(result: RunResult) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(g)}</td><td>{html.escape(n)}</td><td style='text-align:right'>{_num(v)}</td>"
        f"<td>{html.escape(s)}</td><td>{html.escape(w)}</td></tr>" for g, n, v, s, w in metrics_rows(result))
    table = ("<table class='evaldag-metrics'><tr><th>group</th><th>metric</th><th>value</th><th>status</th>"
             f"<th>reason</th></tr>{rows}</table>")
    try:
        svg = graph_svg(result)
    except Exception as e:  # noqa: BLE001 - a drawing must never hide the numbers
        svg = f"<p>(graph not drawn: {html.escape(type(e).__name__)}: {html.escape(str(e))})</p>"
    return f"<div class='evaldag-run'><p><code>{html.escape(repr(result))}</code></p>{table}{svg}</div>"


def benchmark_html(bench: Any) -> str:
    """The plan of the benchmark's default config, drawn (no data or model is read)."""
    try:
        return graph_svg(Graph(bench.plan(bench.Config())))
    except Exception as e:  # noqa: BLE001 - a config that needs arguments: say so instead of a traceback
        return (f"<p>{html.escape(bench.name)}: {html.escape(bench.description)} (draw a plan with "
                f"<code>Graph(bench.plan(Config(...)))</code>: {html.escape(type(e).__name__)}: {html.escape(str(e))})</p>")


def install() -> None:
    """Nothing to do: the classes declare their displays and ``hooks.DISPLAY`` finds this module.
    Kept so that code calling it keeps working."""


def to_pandas(result: RunResult, run: str = "") -> Any:
    """``RunResult.to_pandas()``: the headline values as a long table (run, model, benchmark,
    metric, split, value), the rows ``evaldag export`` writes; pandas: ``pip install 'evaldag[pandas]'``."""
    return to_frame(result_rows(result, run))
