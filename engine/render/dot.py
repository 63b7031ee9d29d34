"""Graphviz DOT text, for people who already have Graphviz and its tooling.

DOT is always produced in pure Python. Rendering it needs the ``dot`` binary, which is
optional: :func:`dot_to_svg` uses it when it is on the PATH and says so when it is not,
and nothing else in evaldag depends on it (the built-in SVG renderer does not).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

from .clusters import cluster_order, cluster_title
from .svg import COLORS, tooltip
from .view import NodeView, as_view


def _q(s: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, every line break a ``\\n``."""
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\r\n", "\n")
    return '"' + re.sub(r"[\n\r\x0b\x0c\x85\u2028\u2029]", "\\\\n", s) + '"'


def _label(n: NodeView) -> str:
    lines = n.display_names() + ([f"shared ×{len(n.names)}"] if n.shared else [])
    return "\n".join(lines + [t for t in (n.detail(), n.outcome()) if t])


def to_dot(source: Any, *, rankdir: str = "LR", **view_kw: Any) -> str:
    """A ``digraph`` with one cluster per band, fill colours per status, tooltips."""
    view = as_view(source, **view_kw)
    out = [
        "digraph evaldag {",
        f"    rankdir={rankdir};",
        f"    label={_q(view.title)}; labelloc=t; fontname=Helvetica;",
        '    node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=11];',
        "    edge [color=\"#94a3b8\", arrowsize=0.7];",
    ]
    by_band: dict = {}
    for n in view.nodes:
        by_band.setdefault((n.group, n.split), []).append(n)
    for ci, key in enumerate(cluster_order(view)):
        title = cluster_title(key, view)
        out.append(f"    subgraph cluster_{ci} {{")
        out.append(f'        label={_q(title)}; style="rounded,filled"; fillcolor="#f8fafc"; color="#e2e8f0";')
        for n in by_band.get(key, []):
            fill, stroke, ink = COLORS.get(n.status, COLORS["planned"])
            style = "rounded,filled" + (",dashed" if n.status in ("planned", "skipped") and n.kind != "resource" else "")
            attrs = [f"label={_q(_label(n))}", f'fillcolor="{fill}"', f'color="{stroke}"', f'fontcolor="{ink}"',
                     f"style={_q(style)}", f"tooltip={_q(tooltip(n))}"]
            if n.shared:
                attrs.append("peripheries=2")
            if n.kind == "resource":
                attrs.append("shape=ellipse")
            if n.kind == "scorer":
                attrs.append("penwidth=2")
            out.append(f"        {n.id} [{', '.join(attrs)}];")
        out.append("    }")
    for e in view.edges:
        tip = ", ".join(e.keys)
        out.append(f"    {e.src} -> {e.dst}" + (f" [tooltip={_q(tip)}];" if tip else ";"))
    out.append("}")
    return "\n".join(out) + "\n"


def dot_to_svg(dot_text: str, timeout: float = 60.0) -> str:
    """Render DOT with the Graphviz binary; raises RuntimeError when it is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("the Graphviz 'dot' binary is not installed; use --format svg for the built-in renderer")
    done = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"dot failed: {done.stderr.strip()}")
    return done.stdout
