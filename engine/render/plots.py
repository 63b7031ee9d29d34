"""Small inline-SVG plots for the run report: histograms and ROC curves, no matplotlib.

The report has to be one file that opens anywhere, and the numbers must match the
JSON it was made from. So the plots are drawn here from the raw per-item values, with
deterministic output (fixed rounding, no timestamps) and with the math kept separate
(:func:`roc_curve`, :func:`bin_counts`) so tests can check it against the references:
ROC AUC is computed exactly like ``sklearn.metrics.roc_auc_score`` (ties count half).
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

PALETTE = ("#e11d48", "#2563eb", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d")
W, H = 440.0, 280.0
PAD_L, PAD_R, PAD_T, PAD_B = 52.0, 14.0, 46.0, 42.0


def finite(values: Sequence) -> list[float]:
    """The numeric, finite values (NaN, None, strings dropped)."""
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(v):
            out.append(float(v))
    return out


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi] (steps of 1, 2 or 5 × 10^k)."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def tick_text(v: float) -> str:
    return f"{v:.3g}" if v != 0 else "0"


def roc_curve(negatives: Sequence[float], positives: Sequence[float]) -> tuple[list[float], list[float], float] | None:
    """ROC points and AUC with positives scored higher; None if either side is empty.

    Thresholds are the distinct scores from high to low, so tied scores move the curve
    diagonally and count half in the AUC, as in scikit-learn.
    """
    neg, pos = finite(negatives), finite(positives)
    if not neg or not pos:
        return None
    scored = sorted([(s, 1) for s in pos] + [(s, 0) for s in neg], key=lambda t: -t[0])
    fpr, tpr, tp, fp, i = [0.0], [0.0], 0, 0, 0
    while i < len(scored):
        s = scored[i][0]
        while i < len(scored) and scored[i][0] == s:
            tp += scored[i][1]
            fp += 1 - scored[i][1]
            i += 1
        fpr.append(fp / len(neg))
        tpr.append(tp / len(pos))
    auc = sum((fpr[k] - fpr[k - 1]) * (tpr[k] + tpr[k - 1]) / 2 for k in range(1, len(fpr)))
    return fpr, tpr, auc


def bin_counts(values: Sequence[float], lo: float, hi: float, bins: int) -> list[int]:
    """Counts per equal-width bin over [lo, hi]; the last bin includes ``hi``."""
    counts = [0] * bins
    width = (hi - lo) / bins if hi > lo else 1.0
    for v in values:
        k = int((v - lo) / width)
        counts[min(max(k, 0), bins - 1)] += 1
    return counts


class _Frame:
    """A ``w`` × ``h`` picture whose plot area is inset by the pads; data -> pixel maps and axes."""

    def __init__(self, x_lo: float, x_hi: float, y_lo: float, y_hi: float, *, w: float = W, h: float = H,
                 top: float = PAD_T, right: float = PAD_R):
        self.x_lo, self.x_hi, self.y_lo, self.y_hi = x_lo, x_hi, y_lo, y_hi
        self.w, self.h, self.top, self.right = w, h, top, right

    def x(self, v: float) -> float:
        return PAD_L + (v - self.x_lo) / (self.x_hi - self.x_lo or 1.0) * (self.w - PAD_L - self.right)

    def y(self, v: float) -> float:
        return self.h - PAD_B - (v - self.y_lo) / (self.y_hi - self.y_lo or 1.0) * (self.h - self.top - PAD_B)

    def axes(self, xticks: list[float], yticks: list[float], xlabel: str, ylabel: str, xfmt=tick_text, yfmt=tick_text) -> list[str]:
        out, x0, x1, y0 = [], PAD_L, self.w - self.right, self.h - PAD_B
        for t in yticks:
            y = self.y(t)
            out.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="#eef2f7"/>')
            out.append(f'<text x="{x0 - 6:.1f}" y="{y + 3.5:.1f}" text-anchor="end" font-size="10" fill="#64748b">{escape(yfmt(t))}</text>')
        for t in xticks:
            x = self.x(t)
            out.append(f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y0 + 4:.1f}" stroke="#94a3b8"/>')
            out.append(f'<text x="{x:.1f}" y="{y0 + 15:.1f}" text-anchor="middle" font-size="10" fill="#64748b">{escape(xfmt(t))}</text>')
        out.append(f'<path d="M{x0:.1f},{self.top:.1f} V{y0:.1f} H{x1:.1f}" fill="none" stroke="#94a3b8"/>')
        out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{self.h - 8:.1f}" text-anchor="middle" font-size="11" '
                   f'fill="#334155">{escape(xlabel)}</text>')
        out.append(f'<text transform="translate(13,{(self.top + y0) / 2:.1f}) rotate(-90)" text-anchor="middle" '
                   f'font-size="11" fill="#334155">{escape(ylabel)}</text>')
        return out


def svg_open(kind: str, title: str, w: float = W, h: float = H) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" class="ed-plot" data-plot="{escape(kind)}" width="{w:.0f}" '
            f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" font-family="Helvetica, Arial, sans-serif" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title>',
            f'<text x="12" y="16" font-size="12.5" font-weight="bold" fill="#0f172a">{escape(title)}</text>']


def legend(items: list[tuple[str, str]], x: float, y: float, swatch: str = "box") -> list[str]:
    """One legend entry per line, from (x, y) down."""
    out = []
    for i, (text, color) in enumerate(items):
        yy = y + i * 14
        if swatch == "box":
            out.append(f'<rect x="{x:.1f}" y="{yy - 8:.1f}" width="10" height="10" rx="2" fill="{color}" '
                       f'fill-opacity="0.35" stroke="{color}"/>')
        else:
            out.append(f'<rect x="{x:.1f}" y="{yy - 5:.1f}" width="12" height="3" fill="{color}"/>')
        out.append(f'<text x="{x + 16:.1f}" y="{yy + 1:.1f}" font-size="10.5" fill="#334155">{escape(text)}</text>')
    return out


def histogram_svg(series: list[tuple[str, Sequence[float]]], *, title: str, xlabel: str, kind: str = "histogram",
                  bins: int = 20, lo: float | None = None, hi: float | None = None, log: bool | None = None) -> str | None:
    """Overlaid histograms (share of items per bin) of several series on one common axis.

    ``log=None`` switches to log10 of the values when they are all positive and span
    more than two decades (probabilities of unseen answers, truth ratios of a
    well-unlearned model), which a linear axis would squash into one bar.
    """
    data = [(label, finite(vals)) for label, vals in series]
    data = [(label, vals) for label, vals in data if vals]
    if not data:
        return None
    allv = [v for _, vals in data for v in vals]
    if log is None:
        log = min(allv) > 0 and max(allv) / min(allv) > 1e2
    if log:
        data = [(label, [math.log10(v) for v in vals if v > 0]) for label, vals in data]
        allv = [v for _, vals in data for v in vals]
        lo = hi = None
    lo = min(allv) if lo is None else lo
    hi = max(allv) if hi is None else hi
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    shares = [[c / len(vals) for c in bin_counts(vals, lo, hi, bins)] for _, vals in data]
    top = max(max(sh) for sh in shares)
    fr = _Frame(lo, hi, 0.0, top * 1.08, top=PAD_T + 14 * (len(data) - 1))
    out = svg_open(kind, title)
    xfmt = (lambda t: f"1e{t:g}") if log else tick_text
    xticks = [t for t in nice_ticks(lo, hi) if lo <= t <= hi]
    out += fr.axes(xticks, nice_ticks(0, top * 1.05, 4), ("log10 " if log else "") + xlabel, "share of items",
                   xfmt=xfmt, yfmt=lambda t: f"{t * 100:.0f}%")
    width = (hi - lo) / bins
    entries = []
    for si, ((label, vals), share) in enumerate(zip(data, shares)):
        color = PALETTE[si % len(PALETTE)]
        d = [f"M{fr.x(lo):.1f},{fr.y(0):.1f}"]
        for k, sh in enumerate(share):
            d.append(f"V{fr.y(sh):.1f} H{fr.x(lo + (k + 1) * width):.1f}")
        d.append(f"V{fr.y(0):.1f} Z")
        mean = sum(vals) / len(vals)
        mean, what = (10 ** mean, "geometric mean") if log else (mean, "mean")
        tip = f"{label}: n={len(vals)}, {what} {mean:.4g}"
        out.append(f'<path class="ed-series" d="{" ".join(d)}" fill="{color}" fill-opacity="0.22" stroke="{color}" '
                   f'stroke-width="1.5"><title>{escape(tip)}</title></path>')
        entries.append((f"{label} (n={len(vals)}, {what} {mean:.3g})", color))
    out += legend(entries, PAD_L, 34.0)
    out.append("</svg>")
    return "\n".join(out)


def roc_svg(curves: list[tuple[str, list[float], list[float], float]], *, title: str, kind: str = "roc",
            intervals: dict[str, Sequence[float]] | None = None) -> str | None:
    """ROC curves (one per attack) on a square plot, the chance diagonal, AUCs in a side legend;
    ``intervals``: an attack's AUC interval (lo, hi), in brackets beside its AUC at its precision."""
    if not curves:
        return None
    bracket = {k: f" [{v[0]:.3f}, {v[1]:.3f}]" for k, v in (intervals or {}).items()}
    side = 250.0
    legend_w = 30 + max(len(f"{c[0]} · AUC 0.000{bracket.get(c[0], '')}") for c in curves) * 5.7
    w, h = PAD_L + side + legend_w, 30 + side + PAD_B
    fr = _Frame(0.0, 1.0, 0.0, 1.0, w=w, h=h, top=30.0, right=legend_w)
    out = svg_open(kind, title, w, h)
    ticks = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    out += fr.axes(ticks, ticks, "false positive rate", "true positive rate")
    out.append(f'<line x1="{fr.x(0):.1f}" y1="{fr.y(0):.1f}" x2="{fr.x(1):.1f}" y2="{fr.y(1):.1f}" stroke="#cbd5e1" '
               'stroke-dasharray="4 4"/>')
    entries = []
    for ci, (label, fpr, tpr, auc) in enumerate(curves):
        color = PALETTE[ci % len(PALETTE)]
        pts = " ".join(f"{fr.x(a):.1f},{fr.y(b):.1f}" for a, b in zip(fpr, tpr))
        out.append(f'<polyline class="ed-series" points="{pts}" fill="none" stroke="{color}" stroke-width="1.8" '
                   f'stroke-opacity="0.9"><title>{escape(label)}: AUC {auc:.4f}</title></polyline>')
        entries.append((f"{label} · AUC {auc:.3f}{bracket.get(label, '')}", color))
    out += legend(entries, fr.x(1) + 14, fr.top + 10, swatch="line")
    out.append("</svg>")
    return "\n".join(out)
