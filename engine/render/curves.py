"""Training pictures, inline SVG: a metric against the training step, and a benchmark's trade-off
figure (one metric on a log scale against another; TOFU's: forget quality against model utility)
with the Pareto front joined. A curve's points carry their bootstrap interval as a bar when
the runs wrote one (``<GROUP>_INTERVALS_EVAL.json``).

Plain numbers in, one self-contained ``<svg>`` out (no script, no external file), drawn with
``plots.py``'s frame and legend; deterministic (fixed rounding). The caller computes which
points form the Pareto front (``selection.py``), so this stays a leaf.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any, Mapping, Sequence

from .plots import PALETTE, _Frame, legend, nice_ticks, svg_open, tick_text

MARKS = {"reference": "#16a34a", "target": "#0f172a"}


def _bar(b: Any) -> tuple[float, float] | None:
    if not isinstance(b, (list, tuple)) or len(b) != 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in b):
        return None
    return float(min(b)), float(max(b))


def curve_svg(metric: str, points: Sequence[tuple[int, float]], *, chosen: Sequence[int] = (),
              bars: Mapping[int, Sequence[float]] | None = None, level: float = 0.95) -> str | None:
    """``metric`` against the step (one polyline, a dot per checkpoint; ``chosen`` steps ringed;
    ``bars``: step -> the ``level`` interval, drawn as a vertical bar through the dot)."""
    pts = sorted((int(s), float(v)) for s, v in points if v is not None and math.isfinite(v))
    if len(pts) < 2:
        return None
    spans = {x: b for x, _ in pts if (b := _bar((bars or {}).get(x))) is not None}
    xs, ys = [p[0] for p in pts], [p[1] for p in pts] + [v for b in spans.values() for v in b]
    xt, yt = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
    fr = _Frame(min(xt[0], min(xs)), max(xt[-1], max(xs)), min(yt[0], min(ys)), max(yt[-1], max(ys)), w=340, h=220, top=30)
    out = svg_open("curve", f"{metric} by training step", 340, 220)
    out += fr.axes(xt, yt, "training step", metric)
    line = " ".join(f"{fr.x(x):.1f},{fr.y(y):.1f}" for x, y in pts)
    out.append(f'<polyline class="ed-series" points="{line}" fill="none" stroke="{PALETTE[1]}" stroke-width="1.8"/>')
    for x, (lo, hi) in sorted(spans.items()):
        cx = fr.x(x)
        out.append(f'<path class="ed-bar" d="M{cx:.1f},{fr.y(lo):.1f}V{fr.y(hi):.1f}M{cx - 3:.1f},{fr.y(lo):.1f}h6M{cx - 3:.1f},'
                   f'{fr.y(hi):.1f}h6" stroke="{PALETTE[1]}" stroke-width="1" fill="none" opacity="0.6"/>')
    for x, y in pts:
        ring = ' stroke="#e11d48" stroke-width="2.5"' if x in chosen else ""
        out.append(f'<circle cx="{fr.x(x):.1f}" cy="{fr.y(y):.1f}" r="3.2" fill="{PALETTE[1]}"{ring}>'
                   f'<title>step {x}: {metric} {y:.6g}{_span(spans.get(x), level)}</title></circle>')
    out.append("</svg>")
    return "\n".join(out)


def _span(b: tuple[float, float] | None, level: float) -> str:
    return f", {100 * level:.0f}% interval [{b[0]:.6g}, {b[1]:.6g}]" if b else ""


def _log(v: float, floor: float) -> float:
    return math.log10(max(v, floor))


def tradeoff_svg(points: Sequence[tuple[str, float, float, str]], front: Sequence[str], *,
                 x_name: str, y_name: str, reference_label: str = "reference model") -> str | None:
    """``(label, x, y, kind)`` points, kind ``"checkpoint"``, ``"reference"`` (shown as
    ``reference_label``) or ``"target"``; y on a log scale (values at or below zero drawn at the
    smallest positive one); ``front`` (labels) joined in x order."""
    pts = [(lab, float(x), float(y), kind) for lab, x, y, kind in points
           if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
    if len(pts) < 2:
        return None
    floor = min([y for _, _, y, _ in pts if y > 0] or [1e-12])
    xs = [x for _, x, _, _ in pts]
    ys = [_log(y, floor) for _, _, y, _ in pts]
    lo, hi = math.floor(min(ys)), max(math.ceil(max(ys)), math.floor(min(ys)) + 1)
    xt = nice_ticks(min(xs), max(xs))
    fr = _Frame(min(xt[0], min(xs)), max(xt[-1], max(xs)), lo, hi, w=440, h=300, top=30, right=110)
    out = svg_open("tradeoff", f"{y_name} (log) against {x_name}", 440, 300)
    step = max(1, (hi - lo) // 6)
    out += fr.axes(xt, [float(k) for k in range(lo, hi + 1, step)], x_name, f"{y_name} (log10)",
                   yfmt=lambda t: f"1e{int(t)}", xfmt=tick_text)
    on_front = sorted((p for p in pts if p[0] in front), key=lambda p: p[1])
    if len(on_front) > 1:
        line = " ".join(f"{fr.x(x):.1f},{fr.y(_log(y, floor)):.1f}" for _, x, y, _ in on_front)
        out.append(f'<polyline class="ed-front" points="{line}" fill="none" stroke="#e11d48" stroke-width="1.5" '
                   'stroke-dasharray="5 3"/>')
    for lab, x, y, kind in pts:
        color = MARKS.get(kind, PALETTE[1])
        cx, cy = fr.x(x), fr.y(_log(y, floor))
        shape = (f'<rect x="{cx - 4:.1f}" y="{cy - 4:.1f}" width="8" height="8" fill="{color}"' if kind != "checkpoint"
                 else f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.6" fill="{color}"')
        ring = ' stroke="#e11d48" stroke-width="2"' if lab in front else ""
        out.append(f'{shape}{ring} class="ed-point" data-kind="{escape(kind)}"><title>{escape(lab)}: {x_name} {x:.6g}, '
                   f'{y_name} {y:.6g}</title>{"</rect>" if kind != "checkpoint" else "</circle>"}')
        out.append(f'<text x="{cx + 6:.1f}" y="{cy - 5:.1f}" font-size="9" fill="#475569">{escape(lab)}</text>')
    out += legend([("checkpoint", PALETTE[1]), (reference_label, MARKS["reference"]), ("target", MARKS["target"]),
                   ("Pareto front", "#e11d48")], fr.x(fr.x_hi) + 12, fr.top + 10, swatch="line")
    out.append("</svg>")
    return "\n".join(out)
