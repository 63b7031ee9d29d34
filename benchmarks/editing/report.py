"""The editing section of report.html: causal-trace heat maps, read from EDITING_EVAL.json.

One heat map per traced edit and trace kind (block output, MLP, attention): a row per
prompt token (the subject's tokens starred, as in ROME's figures), a column per layer,
each cell coloured by P(answer) with that state restored, from the corrupted run's
probability (white) to the grid's maximum (dark). Every cell carries its number in
``data-value`` so tests can check the picture against the JSON.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ...engine.render.plots import svg_open

TRACES = {"causal_trace": "hidden state", "causal_trace_mlp": "MLP output", "causal_trace_attn": "attention output"}
CELL_W, CELL_H, LABEL_W, TOP = 26.0, 16.0, 150.0, 44.0
DARK = (76, 29, 149)  # violet-900: the most restoring cell


def _colour(t: float) -> str:
    t = min(max(t, 0.0), 1.0)
    r, g, b = (round(255 + (c - 255) * t) for c in DARK)
    return f"rgb({r},{g},{b})"


def heatmap_svg(trace: dict, title: str) -> str:
    """One edit's [positions x layers] grid as an SVG heat map."""
    scores = trace["scores"]
    n_pos, n_layers = len(scores), len(scores[0]) if scores else 0
    lo, hi = float(trace["low"]), max([float(x) for row in scores for x in row] + [float(trace["low"])])
    span = hi - lo if hi > lo else 1.0
    a, b = trace["subject"]
    w, h = max(LABEL_W + n_layers * CELL_W + 20, 460.0), TOP + n_pos * CELL_H + 48
    out = svg_open("causal-trace", title, w, h)
    for t, row in enumerate(scores):
        y = TOP + t * CELL_H
        token = trace["tokens"][t].replace("\n", "\\n")
        star = "*" if a <= t < b else ""
        out.append(f'<text x="{LABEL_W - 6:.1f}" y="{y + CELL_H - 4:.1f}" font-size="10" text-anchor="end" '
                   f'fill="#334155">{escape(token + star)}</text>')
        for layer, p in enumerate(row):
            x = LABEL_W + layer * CELL_W
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{CELL_W - 1:.1f}" height="{CELL_H - 1:.1f}" '
                       f'fill="{_colour((float(p) - lo) / span)}" data-value="{float(p):.6g}" data-cell="{t},{layer}">'
                       f'<title>{escape(token)} / layer {layer}: {float(p):.4f}</title></rect>')
    for layer in range(n_layers):
        out.append(f'<text x="{LABEL_W + layer * CELL_W + CELL_W / 2:.1f}" y="{TOP - 4:.1f}" font-size="10" '
                   f'text-anchor="middle" fill="#334155">{layer}</text>')
    foot = f"P({trace['answer'].strip()}): clean {float(trace['high']):.3f}, corrupted {lo:.3f}, best restore {hi:.3f}"
    sites = [f"{label}: layer {trace[k]['best_layer']} (+{float(trace[k]['effect']):.3f})"
             for k, label in (("subject_last", "subject's last token"), ("last", "last token")) if isinstance(trace.get(k), dict)]
    out.append(f'<text x="12" y="{h - 24:.1f}" font-size="10.5" fill="#334155">{escape(foot)}</text>')
    if sites:  # ROME's early and late sites
        out.append(f'<text x="12" y="{h - 10:.1f}" font-size="10.5" fill="#334155">'
                   f'{escape("best restoring layer at the " + "; at the ".join(sites))}</text>')
    out.append("</svg>")
    return "".join(out)


def section_html(runs: list[Any], group: str = "EDITING") -> str:
    """The heat maps of every run that has causal-trace results ('' when none has)."""
    parts = []
    for run in runs:
        ev = run.evals.get(group) or {}
        for metric, label in TRACES.items():
            vbi = (ev.get(metric) or {}).get("value_by_index") or {}
            if not vbi:
                continue
            maps = "".join(heatmap_svg(tr, f"edit {i}: restoring the {label}") for i, tr in vbi.items()
                           if isinstance(tr, dict) and tr.get("scores"))
            name = escape(getattr(run, "title", "") or str(getattr(run, "path", "")))
            parts.append(f'<details class="ed-trace" open><summary>{name}: {escape(metric)} '
                         f'({len(vbi)} edits; restoring the {label} at each token and layer)</summary>{maps}</details>')
    return "".join(parts)


def rome_html(runs: list[Any], group: str = "EDITING") -> str:
    """Per run, a row per (edit, layer): efficacy beside ROME's denominator and key norm, with
    lm-debugger's warning on a denominator below 1 ('' when no run has the diagnostics)."""
    parts = []
    for run in runs:
        ev = run.evals.get(group) or {}
        den = (ev.get("rome_denominator") or {}).get("value_by_index") or {}
        ood = (ev.get("rome_key_ood") or {}).get("value_by_index") or {}
        if not den and not ood:
            continue
        eff = (ev.get("efficacy") or {}).get("value_by_index") or {}
        how = (ev.get("rome_denominator") or ev.get("rome_key_ood") or {}).get("covariance", "")
        rows = []
        for key in dict.fromkeys([*den, *ood]):
            item = den.get(key) or ood.get(key) or {}
            edit = key.split("/")[0]
            e = eff.get(edit, {}).get("score") if isinstance(eff.get(edit), dict) else None
            d = den.get(key, {}).get("value")
            o = ood.get(key, {}).get("value")
            warn = isinstance(d, (int, float)) and d < 1
            cells = [edit, str(item.get("layer", "")), str(item.get("subject", "")),
                     "" if e is None else f"{e:.3f}", "" if d is None else f"{d:.4g}", "" if o is None else f"{o:.4g}"]
            tds = "".join(f"<td>{escape(c)}</td>" for c in cells)
            note = f'<td class="warn" title="{escape(WARNING)}">&lt; 1: large update</td>' if warn else "<td></td>"
            cls = ' class="warn"' if warn else ""
            rows.append(f'<tr data-key="{escape(key)}"{cls}>{tds}{note}</tr>')
        name = escape(getattr(run, "title", "") or str(getattr(run, "path", "")))
        parts.append(f'<details class="ed-rome" open><summary>{name}: ROME conditioning ({escape(how)})</summary>'
                     '<table><tr><th>edit</th><th>layer</th><th>subject</th><th>efficacy</th><th>rome_denominator</th>'
                     f'<th>rome_key_ood</th><th></th></tr>{"".join(rows)}</table>'
                     f'<p>{escape("rome_denominator " + WARNING)}</p></details>')
    return "".join(parts)


WARNING = "< 1: exceptionally small values make the weight delta matrix excessively large (lm-debugger)"
