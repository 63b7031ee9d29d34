"""A self-contained HTML page for one graph: the SVG plus a sortable table of its nodes.

Self-contained means one file with its CSS and script inlined and nothing fetched, so
it opens from a cluster's scratch disk, an e-mail attachment or an air-gapped machine.
The script only adds comfort (sorting, click a node to highlight what it depends on
and what depends on it, a filter box); without it the page is still complete.
"""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from typing import Any

from .clusters import cluster_order
from .svg import to_svg
from .view import View, as_view, computed_text, fmt_num, fmt_secs


#: in every page evaldag writes: how `evaldag report --out X` knows X is a report it may replace
#: (``engine/outfolder.py`` reads it from here)
REPORT_MARK = '<meta name="generator" content="evaldag">'


def asset(name: str) -> str:
    """The text of a packaged file under ``render/assets`` (CSS and JS inlined into pages)."""
    try:
        # this package by its own name (__package__), so a copy of render/ finds its assets too
        return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"evaldag's page asset {name!r} is not installed: the package data must include "
                                "engine/render/assets/* (setup.py package_data)") from None


def page(title: str, body: str, *, subtitle: str = "") -> str:
    """A whole HTML document with the evaldag stylesheet and script inlined."""
    lead = f'<p class="ed-lead">{escape(subtitle)}</p>' if subtitle else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"{REPORT_MARK}\n"  # how `evaldag report --out X` knows X is a report it may replace
        f"<title>{escape(title)}</title>\n<style>\n{asset('evaldag.css')}</style>\n</head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n{lead}\n{body}\n"
        f'<footer class="ed-foot">made by evaldag · self-contained, nothing loaded from the network</footer>\n'
        f"<script>\n{asset('evaldag.js')}</script>\n</body>\n</html>\n"
    )


def chips(items: list[tuple[str, Any]]) -> str:
    spans = "".join(f'<span class="ed-chip">{escape(k)}<b>{escape(str(v))}</b></span>' for k, v in items)
    return f'<div class="ed-chips">{spans}</div>'


def num_cell(x: float | None, text: str | None = None) -> str:
    """A right-aligned numeric cell that sorts by its value (empty sorts last)."""
    if x is None:
        return '<td class="ed-num" data-sort=""></td>'
    shown = fmt_num(x) if text is None else text
    return f'<td class="ed-num" data-sort="{x!r}" title="{x!r}">{escape(shown)}</td>'


def _seconds_cell(n: Any) -> str:
    """A computed node's time; a cached one's is the time it took when it was computed
    (in brackets: this run spent none), so a warm report keeps the cold run's timings."""
    if n.seconds is not None:
        return num_cell(n.seconds, fmt_secs(n.seconds))
    then = (n.computed or {}).get("seconds")
    if n.status == "cached" and isinstance(then, (int, float)):
        return num_cell(then, f"({fmt_secs(then)})")
    return num_cell(None)


def node_table(view: View) -> str:
    """Every node with its status, time, value, recompute reason, fingerprint and params."""
    head = ["name", "metric", "kind", "group", "split", "status", "seconds", "value", "reason", "fingerprint", "params"]
    num = {"seconds", "value"}
    bands = {key: i for i, key in enumerate(cluster_order(view))}
    rows = []
    for n in sorted(view.nodes, key=lambda n: bands[(n.group, n.split)]):  # stable: the drawing's top-to-bottom order
        names = escape(n.names[0]) + (
            f'<span class="ed-shared-tag" title="{escape(", ".join(n.names))}">shared ×{len(n.names)}</span>'
            + "".join(f"<br>{escape(x)}" for x in n.names[1:]) if n.shared else "")
        params = json.dumps(n.params, sort_keys=True) if n.params else ""
        fp = n.fingerprint or ""
        rows.append(
            f'<tr class="ed-row" data-id="{n.id}"><td>{names}</td><td>{escape(n.metric)}</td><td>{escape(n.kind)}</td>'
            f"<td>{escape(n.group or '')}</td><td>{escape(n.split or '')}</td>"
            f'<td data-sort="{escape(n.status)}"><span class="ed-status ed-status-{escape(n.status)}">{escape(n.status)}</span></td>'
            + _seconds_cell(n)
            + num_cell(n.value)
            + f'<td>{escape(n.reason or (computed_text(n.computed) if n.computed else ""))}</td><td class="ed-mono" title="{escape(fp)}">{escape(fp[:12])}</td>'
            f'<td class="ed-mono">{escape(params[:160] + ("…" if len(params) > 160 else ""))}</td></tr>'
        )
    ths = "".join(f'<th class="ed-num">{h}</th>' if h in num else f"<th>{h}</th>" for h in head)
    return f'<table class="ed-table ed-sortable ed-nodes-table"><thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def graph_section(view: View, *, id_prefix: str = "ed", table: bool = True) -> str:
    """The DAG (with legend), its status counts, a filter box and the node table."""
    facts: list[tuple[str, Any]] = [("nodes", len(view.nodes))] + list(view.counts().items())
    shared = sum(1 for n in view.nodes if n.shared)
    if shared:
        facts.append(("shared", shared))
    if view.meta.get("wall_seconds") is not None:
        facts.append(("wall time", fmt_secs(view.meta["wall_seconds"])))
    parts = [f'<section class="ed-graph" data-prefix="{id_prefix}">', chips(facts),
             '<p class="ed-muted">Click a box to highlight what it depends on and what depends on it; '
             "hover for fingerprint, time and reason.</p>",
             f'<div class="ed-scroll">{to_svg(view, id_prefix=id_prefix, standalone=False)}</div>']
    if table:
        parts += ['<input class="ed-filter" type="search" placeholder="filter nodes (name, metric, status…)">', node_table(view)]
    parts.append("</section>")
    return "\n".join(parts)


def to_html(source: Any, *, title: str | None = None, **view_kw: Any) -> str:
    """A standalone page for one graph (plan or run view)."""
    view = as_view(source, **view_kw)
    kind = "plan: what a run would compute" if view.mode == "plan" else "run: what each node did"
    return page(title or view.title, graph_section(view), subtitle=kind)
