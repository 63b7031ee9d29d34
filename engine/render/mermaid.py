"""Mermaid flowchart text: the graph where people already read Markdown.

GitHub, GitLab and most notebook viewers render Mermaid natively, so a plan or a run
pasted into an issue or a PR shows as a diagram with no tool installed. Subgraphs
follow the same bands as the SVG (benchmark, then split); a ``classDef`` per status
colours the boxes; shared nodes use the double-sided "subroutine" shape.
"""

from __future__ import annotations

import re
from typing import Any

from .clusters import cluster_order, cluster_title, split_title
from .svg import COLORS, css_token
from .view import NodeView, as_view


def _text(s: str) -> str:
    """Mermaid-safe label text (entity codes for the characters its parser reserves).

    ``#`` first, so a name that already reads like an entity code is shown as typed;
    line breaks and other control characters become spaces (a label is one line).
    """
    s = re.sub(r"[\x00-\x1f\x7f\u2028\u2029]", " ", s)
    for ch, code in (("#", "#35;"), ("&", "#amp;"), ("'", "#39;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("[", "#91;"), ("]", "#93;"),
                     ("{", "#123;"), ("}", "#125;"), ("|", "#124;"), ("`", "#96;")):
        s = s.replace(ch, code)
    return s


def _label(n: NodeView) -> str:
    lines = [f"<b>{_text(nm)}</b>" for nm in n.display_names()]
    if n.shared:
        lines.append(f"<i>shared ×{len(n.names)}</i>")
    if n.detail():
        lines.append(f"<small>{_text(n.detail())}</small>")
    if n.outcome():
        lines.append(_text(n.outcome()))
    return "<br/>".join(lines)


def _shape(n: NodeView) -> str:
    text = f'"{_label(n)}"'
    if n.kind == "resource":
        return f"([{text}])"
    if n.shared:
        return f"[[{text}]]"
    return f"[{text}]"


def to_mermaid(source: Any, *, direction: str = "LR", **view_kw: Any) -> str:
    """A ``flowchart`` of the graph: subgraphs per benchmark/split, classes per status."""
    view = as_view(source, **view_kw)
    out = [f"flowchart {direction}"]
    for status in sorted({n.status for n in view.nodes}):
        fill, stroke, ink = COLORS.get(status, COLORS["planned"])
        dash = ",stroke-dasharray:5 3" if status in ("planned", "skipped") else ""
        out.append(f"    classDef {css_token(status)} fill:{fill},stroke:{stroke},color:{ink}{dash}")
    if any(n.shared for n in view.nodes):
        out.append("    classDef shared stroke-width:3px")
    by_band: dict = {}
    for n in view.nodes:
        by_band.setdefault((n.group, n.split), []).append(n)
    groups: dict = {}
    for key in cluster_order(view):
        groups.setdefault(key[0], []).append(key)
    for gi, (group, keys) in enumerate(groups.items()):
        indent = "    "
        if group is not None:
            out.append(f'    subgraph g{gi}["{_text(group)}"]')
            indent = "        "
        for si, key in enumerate(keys):
            title = cluster_title(key, view) if group is None else split_title(key[1], view.splits)
            inner = indent
            if title:
                out.append(f'{indent}subgraph g{gi}s{si}["{_text(title)}"]')
                inner = indent + "    "
            for n in by_band.get(key, []):
                out.append(f"{inner}{n.id}{_shape(n)}")
            if title:
                out.append(f"{indent}end")
        if group is not None:
            out.append("    end")
    for e in view.edges:
        out.append(f"    {e.src} --> {e.dst}")
    for status in sorted({n.status for n in view.nodes}):
        ids = [n.id for n in view.nodes if n.status == status]
        out.append(f"    class {','.join(ids)} {css_token(status)}")
    shared = [n.id for n in view.nodes if n.shared]
    if shared:
        out.append(f"    class {','.join(shared)} shared")
    return "\n".join(out) + "\n"
