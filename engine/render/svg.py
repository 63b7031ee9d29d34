"""The DAG as a pure-Python SVG: no Graphviz, no JavaScript, no fonts to download.

Each box is coloured by status, scorers (the nodes that ask the model) carry a bar on
their left edge, a node with several display names (one vertex serving several
metrics or benchmarks) gets a double border and a ``×N`` badge, and every box and edge
has a ``<title>`` tooltip with the details a reader asks for first: fingerprint,
seconds, recompute reason, value. Colours are presentation attributes, so the file
looks right on its own, inside a report, or in a Markdown preview.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from .clusters import cluster_order, cluster_title
from .layout import Layout, layout
from .view import NodeView, View, as_view, fmt_num

# status -> (fill, stroke, text colour)
COLORS = {
    "planned": ("#ffffff", "#64748b", "#0f172a"),
    "cached": ("#dbeafe", "#2563eb", "#0f172a"),
    "computed": ("#dcfce7", "#16a34a", "#0f172a"),
    "failed": ("#fee2e2", "#dc2626", "#7f1d1d"),
    "skipped": ("#f1f5f9", "#94a3b8", "#475569"),
    "input": ("#f5f3ff", "#7c3aed", "#2e1065"),
}
LEGEND_TEXT = {
    "planned": "planned", "cached": "cached (from the store)", "computed": "computed",
    "failed": "failed", "skipped": "skipped (a parent failed)", "input": "input resource",
}
FONT = "Helvetica, Arial, 'Liberation Sans', 'DejaVu Sans', sans-serif"
NAME_PX, SMALL_PX = 12.5, 10.5
NAME_LH, SMALL_LH = 15.0, 13.0
MIN_W, MAX_W = 96.0, 320.0

_NARROW = set("ijl.,:;'|!I ")
_SEMI = set("ftr()[]{}-/")
_WIDE = set("mwMW@%")


def css_token(s: str) -> str:
    """A value made safe as one CSS class name (statuses and kinds may come from an edited run.json)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", s) or "_"


def text_width(text: str, px: float, bold: bool = False) -> float:
    """A deterministic estimate of rendered width (sans-serif); no font files needed."""
    em = 0.0
    for ch in text:
        if ch in _NARROW:
            em += 0.28
        elif ch in _SEMI:
            em += 0.34
        elif ch in _WIDE:
            em += 0.86
        elif ch.isupper():
            em += 0.68
        elif ch.isdigit() or ch == "_":
            em += 0.56
        else:
            em += 0.54
    return em * px * (1.07 if bold else 1.0)


def clip(text: str, px: float, max_w: float, bold: bool = False) -> str:
    """Shorten ``text`` with an ellipsis so it fits ``max_w`` pixels."""
    if text_width(text, px, bold) <= max_w:
        return text
    while text and text_width(text + "…", px, bold) > max_w:
        text = text[:-1]
    return text + "…"


def node_lines(n: NodeView) -> list[tuple[str, str]]:
    """(text, css class) lines of a box: names, then metric/params, then the outcome."""
    names = n.display_names()
    lines = [(nm, "ed-name") for nm in names[:4]]
    if len(names) > 4:
        lines.append((f"+{len(names) - 4} more names", "ed-sub"))
    if n.detail():
        lines.append((n.detail(), "ed-sub"))
    if n.outcome():
        lines.append((n.outcome(), "ed-stat"))
    return lines


def node_size(n: NodeView) -> tuple[float, float]:
    lines = node_lines(n)
    w = max(text_width(t, NAME_PX if c == "ed-name" else SMALL_PX, c == "ed-name") for t, c in lines) + 26
    if n.shared:
        w += 18
    h = 12 + sum(NAME_LH if c == "ed-name" else SMALL_LH for _, c in lines)
    return (round(min(max(w, MIN_W), MAX_W), 1), round(h, 1))


def tooltip(n: NodeView) -> str:
    rows = [n.label]
    if n.shared:
        rows.append("shared by: " + ", ".join(n.names))
    kind = n.kind if n.kind == "resource" else f"{n.metric}{' v' + n.version if n.version else ''} ({n.kind})"
    rows.append(kind)
    if n.params:
        rows.append("params: " + ", ".join(f"{k}={v}" for k, v in sorted(n.params.items()))[:300])
    rows.append(f"status: {n.status}" + (f" ({n.reason})" if n.reason else "") + (f": {n.problem}" if n.problem else ""))
    if n.seconds is not None:
        rows.append(f"seconds: {n.seconds:.6g}")
    if n.value is not None:
        rows.append(f"value: {fmt_num(n.value)}")
    if n.fingerprint:
        rows.append(f"fingerprint: {n.fingerprint}")
    return "\n".join(rows)


def _path(points: list[tuple[float, float]]) -> str:
    (x, y), d = points[0], [f"M{points[0][0]:.1f},{points[0][1]:.1f}"]
    for nx_, ny in points[1:]:
        if ny == y:
            d.append(f"L{nx_:.1f},{ny:.1f}")
        else:
            dx = (nx_ - x) / 2
            d.append(f"C{x + dx:.1f},{y:.1f} {nx_ - dx:.1f},{ny:.1f} {nx_:.1f},{ny:.1f}")
        x, y = nx_, ny
    return " ".join(d)


def view_layout(view: View, **kw: Any) -> Layout:
    """Lay out a view with its bands and box sizes."""
    idx = {n.id: n for n in view.nodes}
    order = cluster_order(view)
    return layout(view.to_nx(), band=lambda i: (idx[i].group, idx[i].split), band_order=order,
                  size=lambda i: node_size(idx[i]), **kw)


def _legend(view: View, prefix: str) -> tuple[list[str], float]:
    counts = view.counts()
    items = [(s, f"{LEGEND_TEXT[s]} {counts[s]}") for s in counts]
    if any(n.shared for n in view.nodes):
        items.append(("shared", "shared: one node, several names"))
    if any(n.kind == "scorer" for n in view.nodes):
        items.append(("scorer", "▍ scorer: asks the model"))
    out, x = ['<g class="ed-legend" transform="translate(12,10)">'], 0.0
    for key, text in items:
        fill, stroke, _ = COLORS.get(key, COLORS["planned"])
        if key == "shared":
            out.append(f'<rect x="{x - 2:.1f}" y="-2" width="18" height="16" rx="4" fill="none" stroke="{stroke}"/>')
        out.append(f'<rect x="{x:.1f}" y="0" width="14" height="12" rx="3" fill="{fill}" stroke="{stroke}"/>')
        if key == "scorer":
            out.append(f'<rect x="{x + 2:.1f}" y="2" width="3" height="8" fill="#334155"/>')
        out.append(f'<text x="{x + 20:.1f}" y="10.5" font-size="11" fill="#334155">{escape(text)}</text>')
        x += 34 + text_width(text, 11)
    out.append("</g>")
    return out, 30.0


def to_svg(source: Any, *, id_prefix: str = "ed", standalone: bool = True, **view_kw: Any) -> str:
    """The whole DAG as one ``<svg>`` element (``standalone`` adds the XML namespace styles)."""
    view = as_view(source, **view_kw)
    lay = view_layout(view)
    idx = {n.id: n for n in view.nodes}
    legend, top = _legend(view, id_prefix)
    w, h = max(lay.width, 480.0), lay.height + top
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="ed-dag" data-mode="{escape(view.mode)}" data-nodes="{len(view.nodes)}" '
        f'width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" font-family="{escape(FONT)}" role="img" '
        f'aria-label="{escape(view.title)}">',
        f"<title>{escape(view.title)}</title>",
        f'<defs><marker id="{id_prefix}-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#64748b"/></marker></defs>',
    ]
    if standalone:
        out.append("<style>.ed-node:hover rect.ed-box{stroke-width:2.5}.ed-edge:hover{stroke:#0f172a;stroke-width:2}</style>")
    out += legend
    out.append(f'<g transform="translate(0,{top:.0f})">')
    out.append('<g class="ed-bands">')
    for b in lay.bands:
        title = cluster_title(b.key, view)
        out.append(f'<rect class="ed-band" x="4" y="{b.y0:.1f}" width="{w - 8:.0f}" height="{b.y1 - b.y0:.1f}" rx="8" '
                   f'fill="#f8fafc" stroke="#e2e8f0"/>')
        if title:
            out.append(f'<text class="ed-band-label" x="14" y="{b.y0 + 16:.1f}" font-size="11.5" font-weight="bold" '
                       f'fill="#475569">{escape(title)}</text>')
    out.append("</g>")
    out.append('<g class="ed-edges" fill="none">')
    for e in view.edges:
        src, dst = idx[e.src], idx[e.dst]
        dashed = ' stroke-dasharray="4 3"' if src.status in ("failed", "skipped") else ""
        tip = f"{src.label} → {dst.label}" + (f" (as {', '.join(e.keys)})" if e.keys else "")
        out.append(f'<path class="ed-edge" data-src="{escape(e.src)}" data-dst="{escape(e.dst)}" d="{_path(lay.routes[(e.src, e.dst)])}" '
                   f'stroke="#94a3b8" stroke-width="1.3"{dashed} marker-end="url(#{id_prefix}-arrow)">'
                   f"<title>{escape(tip)}</title></path>")
    out.append("</g>")
    out.append('<g class="ed-nodes">')
    for n in view.nodes:
        out += _node(n, lay, id_prefix)
    out.append("</g></g></svg>")
    return "\n".join(out)


def _node(n: NodeView, lay: Layout, prefix: str) -> list[str]:
    (x, y), (w, h) = lay.pos[n.id], lay.size[n.id]
    fill, stroke, ink = COLORS.get(n.status, COLORS["planned"])
    classes = f"ed-node ed-{css_token(n.status)} ed-{css_token(n.kind)}" + (" ed-shared" if n.shared else "")
    dash = ' stroke-dasharray="5 3"' if n.status in ("planned", "skipped") and n.kind != "resource" else ""
    rx = h / 2 if n.kind == "resource" else 6
    out = [f'<g class="{classes}" id="{escape(prefix)}-{escape(n.id)}" data-id="{escape(n.id)}" data-status="{escape(n.status)}" '
           f'data-name="{escape(n.label)}" '
           f'transform="translate({x:.1f},{y:.1f})"><title>{escape(tooltip(n))}</title>']
    if n.shared:
        out.append(f'<rect x="{-w / 2 - 4:.1f}" y="{-h / 2 - 4:.1f}" width="{w + 8:.1f}" height="{h + 8:.1f}" rx="{rx + 3:.1f}" '
                   f'fill="none" stroke="{stroke}" stroke-width="1.4"/>')
    out.append(f'<rect class="ed-box" x="{-w / 2:.1f}" y="{-h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx:.1f}" '
               f'fill="{fill}" stroke="{stroke}" stroke-width="1.4"{dash}/>')
    if n.kind == "scorer":
        out.append(f'<rect x="{-w / 2 + 3:.1f}" y="{-h / 2 + 4:.1f}" width="3" height="{h - 8:.1f}" rx="1.5" fill="{stroke}"/>')
    if n.shared:
        out.append(f'<text class="ed-badge" x="{w / 2 - 6:.1f}" y="{-h / 2 + 12:.1f}" text-anchor="end" font-size="10" '
                   f'font-weight="bold" fill="{stroke}">×{len(n.names)}</text>')
    ty = -h / 2 + 6
    for text, cls in node_lines(n):
        px, lh = (NAME_PX, NAME_LH) if cls == "ed-name" else (SMALL_PX, SMALL_LH)
        ty += lh
        weight = ' font-weight="bold"' if cls == "ed-name" else ""
        color = ink if cls != "ed-sub" else "#64748b"
        label = clip(text, px, w - (40 if n.shared else 22), cls == "ed-name")
        out.append(f'<text class="{cls}" x="0" y="{ty - 3.5:.1f}" text-anchor="middle" font-size="{px}"{weight} '
                   f'fill="{color}">{escape(label)}</text>')
    out.append("</g>")
    return out
