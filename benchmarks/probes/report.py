"""The probes' report sections: per probe a table of metric, interval and mark; a marks overview.

Drawn from ``PROBES_EVAL.json`` of each run folder (``{probe: {"metrics", "intervals",
"marks"}}``), so the report renders any subset of probes, and several runs side by side.
"""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

LETTER = "ABCD"
COLOUR = {"A": "#2e7d32", "B": "#9e9d24", "C": "#ef6c00", "D": "#c62828"}


def _num(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    return f"{x:.4f}" if isinstance(x, (int, float)) else html.escape(str(x))


def _mark(m: dict | None) -> str:
    if not m or m.get("mark_value") is None:
        return "–"
    letter = LETTER[int(m["mark_value"])]
    return f'<b style="color:{COLOUR[letter]}">{letter}</b>'


def probe_table(probe: str, data: dict) -> str:
    """One probe of one run: metric | value | 95 % interval | mark."""
    if "metrics" not in data:
        return f"<p><b>{html.escape(probe)}</b>: {html.escape(str(data.get('status')))} — {html.escape(str(data.get('reason')))}</p>"
    marks, intervals = data.get("marks", {}), data.get("intervals", {})
    rows = []
    for name, value in data["metrics"].items():
        ci = intervals.get(name)
        ci_text = f"[{_num(ci[0])}, {_num(ci[1])}]" if ci else "–"
        rows.append(f"<tr><td>{html.escape(name)}</td><td>{_num(value)}</td><td>{ci_text}</td><td>{_mark(marks.get(name))}</td></tr>")
    head = "<tr><th>metric</th><th>value</th><th>interval</th><th>mark</th></tr>"
    return f"<h3>{html.escape(probe)}</h3><table class='probes'>{head}{''.join(rows)}</table>"


def marks_overview(runs: Sequence[tuple[str, dict]]) -> str:
    """Rows: probe/metric with a mark; columns: runs."""
    keys: list[tuple[str, str]] = []
    for _, evals in runs:
        for probe, data in evals.items():
            for metric in (data.get("marks") or {}):
                if (probe, metric) not in keys:
                    keys.append((probe, metric))
    head = "<tr><th>probe / metric</th>" + "".join(f"<th>{html.escape(t)}</th>" for t, _ in runs) + "</tr>"
    rows = []
    for probe, metric in keys:
        cells = "".join(f"<td>{_mark(((ev.get(probe) or {}).get('marks') or {}).get(metric))}</td>" for _, ev in runs)
        rows.append(f"<tr><td>{html.escape(probe)} / {html.escape(metric)}</td>{cells}</tr>")
    return f"<table class='probes'>{head}{''.join(rows)}</table>"


def sections_html(runs: Sequence[tuple[str, dict]]) -> tuple[str, str]:
    """(marks overview html, per-probe tables html) for runs given as (title, PROBES_EVAL contents)."""
    tables = []
    for title, evals in runs:
        inner = "".join(probe_table(p, d) for p, d in evals.items())
        tables.append(f"<h3>{html.escape(title)}</h3>{inner}" if len(runs) > 1 else inner)
    return marks_overview(runs), "".join(tables)
