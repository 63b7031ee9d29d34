"""WEAT's section of the run report, "Embedding fairness": WEFE's metrics per query, per-word bars.

Built from ``WEAT_EVAL.json`` (``{query_id: {METRIC: {WEFE's result fields}}}``, see
benchmarks/weat/spec.py) and, when it is there, ``WEAT_LOOKUP.json`` (the words each set
lost). An EVAL file of that shape under another name (``spec.write_outputs(group=...)``)
is shown the same way. One table for all queries (a column per metric, per run), then
one collapsible block per query with a bar per word for every metric that has per-word
values: WEAT's s(w, A, B), RNSB's P(negative), MAC's mean cosine distance, RND's
distance difference, RIPA's mean projection. The bars carry the JSON's numbers
(``data-value``) so tests can check them against the file.
"""

from __future__ import annotations

import math
import re
from html import escape
from typing import Any, Callable

from ...engine.render.plots import legend as plot_legend
from ...engine.render.plots import nice_ticks, svg_open, tick_text
from ...engine.render.report_html import Section
from ...engine.render.view import fmt_num, read_json
from ...metrics.fairness.registry import metric_names
#: colour of target set 1, 2, ... (blue / amber tell apart for most colour-blind readers)
SET_COLORS = ("#2563eb", "#d97706", "#16a34a", "#7c3aed", "#0891b2", "#db2777")
GREY = "#94a3b8"
ROW, BAR = 14.0, 10.0


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _finite(x: Any) -> bool:
    v = _num(x)
    return v is not None and math.isfinite(v)


# ---------------------------------------------------------------------- reading
def fairness_evals(run: Any) -> dict[str, dict]:
    """``{bench: its EVAL}`` for the EVAL files of WEAT_EVAL.json's shape in a run folder."""
    out = {}
    for bench, ev in run.evals.items():
        if ev and all(isinstance(q, dict) and q and all(m in metric_names() and isinstance(f, dict) for m, f in q.items())
                      for q in ev.values()):
            out[bench] = ev
    return out


def covered_summary_keys(runs: list, bench: str) -> set[str]:
    """SUMMARY keys (``query_id/METRIC``) that the fairness table shows for every run that has them."""
    shown = [(r.summaries.get(bench, {}), fairness_evals(r).get(bench, {})) for r in runs]
    out = set()
    for key in {k for summary, _ in shown for k in summary}:
        qid, _, metric = key.rpartition("/")
        if all(metric in ev.get(qid, {}) for summary, ev in shown if key in summary):
            out.add(key)
    return out


def _lookup(run: Any, bench: str) -> dict:
    path = run.path / f"{bench}_LOOKUP.json"
    try:
        data = read_json(path) if path.exists() else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _rnd_distance(run: Any, bench: str, qid: str) -> str | None:
    """RND's ``distance`` param from run.json (the EVAL file does not record it)."""
    for node in ((run.run or {}).get("nodes") or {}).values():
        if f"{bench}/{qid}/RND" in (node.get("names") or []):
            return (node.get("params") or {}).get("distance", "norm")
    return None


class _Query:
    """One query in one run: its metrics' fields, set names and colours, lost words."""

    def __init__(self, fields: dict[str, dict], lookup: dict | None):
        self.fields, self.lookup = fields, lookup or {}
        names: list[str] = [t.get("name") for t in self.lookup.get("targets") or [] if isinstance(t, dict)]
        attrs: list[str] = [a.get("name") for a in self.lookup.get("attributes") or [] if isinstance(a, dict)]
        for m, key in (("WEAT", "s_by_word"), ("MAC", "targets_eval")):
            per_set = fields.get(m, {}).get(key)
            if not names and isinstance(per_set, dict):
                names = list(per_set)
        mac = fields.get("MAC", {}).get("targets_eval")
        if not attrs and isinstance(mac, dict):
            attrs = next((list(w) for words in mac.values() if isinstance(words, dict) for w in words.values()
                          if isinstance(w, dict)), [])
        self.targets, self.attributes = [str(n) for n in names], [str(a) for a in attrs]
        self.color = {n: SET_COLORS[i % len(SET_COLORS)] for i, n in enumerate(self.targets)}
        self.word_set: dict[str, str] = {}
        for t in self.lookup.get("targets") or []:
            for w in t.get("found") or [] if isinstance(t, dict) else []:
                self.word_set.setdefault(w, t.get("name"))
        for m, key in (("WEAT", "s_by_word"), ("MAC", "targets_eval")):  # keyed by the preprocessed words
            per_set = fields.get(m, {}).get(key)
            for s, words in (per_set.items() if isinstance(per_set, dict) else []):
                for w in words if isinstance(words, dict) else []:
                    self.word_set.setdefault(w, s)

    def t(self, i: int) -> str:
        return self.targets[i] if i < len(self.targets) else f"T{i + 1}"

    def a(self, i: int) -> str:
        return self.attributes[i] if i < len(self.attributes) else "AB"[i] if i < 2 else f"A{i + 1}"

    def lost(self) -> list[str]:
        out = []
        for s in list(self.lookup.get("targets") or []) + list(self.lookup.get("attributes") or []):
            if isinstance(s, dict) and s.get("missing"):
                n = len(s.get("found") or []) + len(s["missing"])
                out.append(f"{s.get('name')}: {len(s['missing'])} of {n} ({', '.join(map(str, s['missing']))})")
        return out


# ---------------------------------------------------------------------- the bar chart
def word_bars_svg(rows: list[tuple[str, float, str, str]], *, title: str, kind: str, xlabel: str,
                  legend: list[tuple[str, str]] = (), marks: list[tuple[float, str, str]] = (),
                  lo: float | None = None, hi: float | None = None, dots: bool = False,
                  errors: list[float] | None = None) -> str | None:
    """Horizontal bars, one per (word, value, colour, tooltip) row, in the given order.

    ``marks`` are dashed vertical lines (value, colour, tooltip); ``errors`` a ± half-width
    per row; ``dots`` draws a dot instead of a bar (for values far from zero, like MAC's).
    """
    rows = [r for r in rows if _finite(r[1])]
    if not rows:
        return None
    errs = errors or [0.0] * len(rows)
    vals = [v for _, v, _, _ in rows]
    ext = [v - e for v, e in zip(vals, errs)] + [v + e for v, e in zip(vals, errs)] + [m[0] for m in marks]
    if lo is None or hi is None:
        a, b = min(ext), max(ext)
        if not dots:
            a, b = min(a, 0.0), max(b, 0.0)
        pad = (b - a) * 0.04 or 0.5
        lo = a - pad if lo is None else lo
        hi = b + pad if hi is None else hi
    label_w = 12 + 6.2 * min(24, max(len(w) for w, *_ in rows))
    plot_w, val_w = 196.0, 52.0
    w = max(label_w + plot_w + val_w, 330.0)
    top = 30.0 + 14 * len(legend) + 6
    h = top + ROW * len(rows) + 40

    def x(v: float) -> float:
        return label_w + (min(max(v, lo), hi) - lo) / (hi - lo) * plot_w

    out = svg_open(kind, title, w, h)
    out += plot_legend(list(legend), 12.0, 34.0)
    y_end = top + ROW * len(rows)
    for t in [t for t in nice_ticks(lo, hi, 4) if lo <= t <= hi]:
        out.append(f'<line x1="{x(t):.1f}" y1="{top - 2:.1f}" x2="{x(t):.1f}" y2="{y_end:.1f}" stroke="#eef2f7"/>')
        out.append(f'<text x="{x(t):.1f}" y="{y_end + 13:.1f}" text-anchor="middle" font-size="10" fill="#64748b">'
                   f"{escape(tick_text(t))}</text>")
    out.append(f'<text x="{min(max(label_w + plot_w / 2, 3.0 * len(xlabel) + 6), w - 3.0 * len(xlabel) - 6):.1f}" '
               f'y="{h - 8:.1f}" text-anchor="middle" font-size="10.5" fill="#334155">{escape(xlabel)}</text>')
    base = lo if dots else min(max(0.0, lo), hi)
    for i, ((word, v, color, tip), e) in enumerate(zip(rows, errs)):
        y = top + i * ROW
        shown = word if len(word) <= 24 else word[:23] + "…"
        bar = (f'<line x1="{x(lo):.1f}" y1="{y + ROW / 2:.1f}" x2="{x(v):.1f}" y2="{y + ROW / 2:.1f}" stroke="#e2e8f0"/>'
               f'<circle cx="{x(v):.1f}" cy="{y + ROW / 2:.1f}" r="3.6" fill="{color}"/>' if dots else
               f'<rect x="{min(x(base), x(v)):.1f}" y="{y + (ROW - BAR) / 2:.1f}" width="{max(abs(x(v) - x(base)), 0.8):.1f}" '
               f'height="{BAR:.1f}" rx="1.5" fill="{color}" fill-opacity="0.8"/>')
        if e:
            bar += (f'<path d="M{x(v - e):.1f},{y + ROW / 2:.1f} H{x(v + e):.1f} M{x(v - e):.1f},{y + 4:.1f} V{y + ROW - 4:.1f} '
                    f'M{x(v + e):.1f},{y + 4:.1f} V{y + ROW - 4:.1f}" stroke="#334155" stroke-width="1" fill="none"/>')
        out.append(f'<g class="ed-bar" data-word="{escape(word)}" data-value="{v!r}"><title>{escape(tip)}</title>'
                   f'<text x="{label_w - 6:.1f}" y="{y + ROW - 3.5:.1f}" text-anchor="end" font-size="10" fill="#334155">'
                   f'{escape(shown)}</text>{bar}<text x="{label_w + plot_w + 8:.1f}" y="{y + ROW - 3.5:.1f}" font-size="9.5" '
                   f'fill="#64748b">{escape(f"{v:.3g}")}</text></g>')
    if lo < 0 < hi and not dots:
        out.append(f'<line x1="{x(0):.1f}" y1="{top - 2:.1f}" x2="{x(0):.1f}" y2="{y_end:.1f}" stroke="#64748b"/>')
    for v, color, tip in marks:
        out.append(f'<line class="ed-mark" x1="{x(v):.1f}" y1="{top - 4:.1f}" x2="{x(v):.1f}" y2="{y_end + 2:.1f}" '
                   f'stroke="{color}" stroke-width="1.5" stroke-dasharray="4 3"><title>{escape(tip)}</title></line>')
    out.append("</svg>")
    return "\n".join(out)


def _desc(rows: list, key: Callable = lambda r: r[1]) -> list:
    return sorted(rows, key=lambda r: -key(r))  # stable: ties keep the file's order


# ---------------------------------------------------------------------- one chart per metric
def _weat(q: _Query, f: dict, _: Any) -> tuple[str | None, str]:
    sbw = f.get("s_by_word")
    if not isinstance(sbw, dict):
        return None, ""
    rows, legend, marks = [], [], []
    for s, words in sbw.items():
        vals = [v for v in (words or {}).values() if _finite(v)]
        c = q.color.get(s, GREY)
        rows += [(w, v, c, f"{w} ({s}): s = {v:.6g}") for w, v in (words or {}).items()]
        if vals:
            m = sum(vals) / len(vals)
            legend.append((f"{s} (n={len(vals)}, mean s {m:.3g})", c))
            marks.append((m, c, f"{s}: mean s = {m:.6g}"))
    a, b = q.a(0), q.a(1)
    svg = word_bars_svg(_desc(rows), title=f"WEAT · s(w, {a}, {b})", kind="weat-s",
                        xlabel=f"mean cos(w, {a}) − mean cos(w, {b})", legend=legend, marks=marks)
    return svg, (f"Per target word; positive: closer to {a} than to {b}. WEAT = Σ s over {q.t(0)} − Σ s over "
                 f"{q.t(1)}; the effect size is the gap between the dashed means over the standard deviation of all s.")


def _by_set(q: _Query, words: dict, fmt: str) -> tuple[list, list]:
    rows, seen = [], []
    for w, v in words.items():
        s = q.word_set.get(w)
        rows.append((w, v, q.color.get(s, GREY), fmt.format(w=w, s=s or "?", v=v)))
        if s not in seen:
            seen.append(s)
    legend = [(str(s), q.color.get(s, GREY)) for s in q.targets if s in seen]
    return rows, legend


def _rnsb(q: _Query, f: dict, _: Any) -> tuple[str | None, str]:
    probs = f.get("negative_sentiment_probabilities")
    if not isinstance(probs, dict):
        return None, ""
    rows, legend = _by_set(q, probs, "{w} ({s}): P = {v:.6g}")
    svg = word_bars_svg(_desc(rows), title=f"RNSB · P({q.a(1)} | w)", kind="rnsb-p",
                        xlabel=f"P({q.a(1)} | w)", legend=legend, lo=0.0, hi=1.0)
    return svg, (f"Per target word: a logistic regression trained on {q.a(0)} vs {q.a(1)}. RNSB is the KL divergence "
                 "of these probabilities (normalised to sum to 1) from the uniform distribution: equal bars give 0.")


def _mac(q: _Query, f: dict, _: Any) -> tuple[str | None, str]:
    te = f.get("targets_eval")
    if not isinstance(te, dict):
        return None, ""
    rows, legend = [], []
    for s, words in te.items():
        c = q.color.get(s, GREY)
        legend.append((str(s), c))
        for w, per_attr in (words or {}).items():
            vals = [v for v in (per_attr or {}).values() if _finite(v)]
            if vals:
                detail = ", ".join(f"{a} {v:.4g}" for a, v in per_attr.items())
                rows.append((w, sum(vals) / len(vals), c, f"{w} ({s}): mean cosine distance {sum(vals) / len(vals):.6g} ({detail})"))
    svg = word_bars_svg(_desc(rows), title="MAC · mean cosine distance", kind="mac-d", dots=True,
                        xlabel="1 − cos(w, a), mean over attribute words", legend=legend)
    attrs = ", ".join(q.attributes) or "the attribute sets"
    return svg, (f"Per target word, averaged over {attrs}. MAC is the mean of these over all target words; "
                 "lower means closer to the attribute words.")


def _toward(q: _Query) -> list[tuple[str, str]]:
    return [(f"toward {q.t(0)}", q.color.get(q.t(0), SET_COLORS[0])), (f"toward {q.t(1)}", q.color.get(q.t(1), SET_COLORS[1]))]


def _rnd(q: _Query, f: dict, distance: Any) -> tuple[str | None, str]:
    dbw = f.get("distance_by_word")
    if not isinstance(dbw, dict):
        return None, ""
    (n1, c1), (n2, c2) = _toward(q)
    if distance == "cos":
        xlabel, first = f"cos(w, mean {q.t(0)}) − cos(w, mean {q.t(1)})", True
    else:
        xlabel, first = f"dist(w, mean {q.t(0)}) − dist(w, mean {q.t(1)})", False
    known = distance in ("norm", "cos")
    rows = [(w, v, (c1 if (v > 0) == first else c2) if known else GREY, f"{w}: {v:.6g}") for w, v in dbw.items()]
    svg = word_bars_svg(_desc(rows), title="RND · distance difference", kind="rnd-d", xlabel=xlabel,
                        legend=[(n1, c1), (n2, c2)] if known else [])
    return svg, "Per attribute word. RND is the mean of these differences over the attribute words."


def _ripa(q: _Query, f: dict, _: Any) -> tuple[str | None, str]:
    wv = f.get("word_values")
    if not isinstance(wv, dict):
        return None, ""
    (n1, c1), (n2, c2) = _toward(q)
    items = [(w, d.get("mean"), _num(d.get("std")) or 0.0) for w, d in wv.items() if isinstance(d, dict)]
    items = _desc([i for i in items if _finite(i[1])])
    rows = [(w, m, c1 if m > 0 else c2, f"{w}: mean {m:.6g}, std {s:.4g}") for w, m, s in items]
    svg = word_bars_svg(rows, title="RIPA · projection on t1 − t2", kind="ripa-w", errors=[s for *_, s in items],
                        xlabel="w · (t1 − t2) / |t1 − t2|, mean ± std", legend=[(n1, c1), (n2, c2)])
    return svg, (f"Per attribute word, over the ({q.t(0)}, {q.t(1)}) word pairs. RIPA is the mean of these means "
                 "over the attribute words.")


CHARTS = (("WEAT", _weat), ("RNSB", _rnsb), ("MAC", _mac), ("RND", _rnd), ("RIPA", _ripa))


# ---------------------------------------------------------------------- the section
def _cell(f: dict | None, key: str) -> str:
    if not isinstance(f, dict):
        return '<td class="ed-num" data-sort=""></td>'
    if f.get("status") in ("failed", "skipped"):
        return f'<td class="ed-num ed-warn" data-sort="" title="{escape(str(f.get("reason") or ""))}">{escape(f["status"])}</td>'
    v = _num(f.get(key))
    if v is None and key in f and f[key] is None and f.get("reason"):
        v = math.nan  # a NaN as evaldag writes it: null, with its reason (NaN is not JSON)
    if v is None:
        return '<td class="ed-num" data-sort=""></td>'
    if not math.isfinite(v):
        why = f.get("reason") or "not a number"
        return f'<td class="ed-num ed-nan" data-sort="" title="{escape(str(why))}">{escape(fmt_num(v))}</td>'
    return f'<td class="ed-num" data-sort="{v!r}" title="{v!r}">{escape(fmt_num(v))}</td>'


def _columns(metrics: list[str], has_p: bool) -> list[tuple[str, str, str, str]]:
    """(header, tooltip, metric, field) per column."""
    cols = []
    for m in metrics:
        cols.append((m, f"{m}'s result (WEFE's 'result')", m, "result"))
        if m == "WEAT":
            cols.append(("WEAT effect size", "Cohen's d of s(w, A, B) between the target sets", "WEAT", "effect_size"))
            if has_p:
                cols.append(("WEAT p-value", "permutation test of the WEAT statistic", "WEAT", "p_value"))
    return cols


def _anchor(bench: str, qid: str) -> str:
    return "ed-fair-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{bench}-{qid}")


def fairness_section(runs: list) -> str:
    """The whole section, or "" when no run has a WEAT_EVAL.json-shaped file."""
    per_run = [(r, fairness_evals(r)) for r in runs]
    benches = sorted({b for _, fe in per_run for b in fe})
    if not benches:
        return ""
    multi = len(runs) > 1
    parts = ['<p class="ed-muted">One row per query: each metric\'s result as WEFE returns it, WEAT\'s effect size '
             "and p-value. Hover a NaN for its reason. Expand a query below for its words: one bar per word, "
             "from the per-word values in the EVAL file.</p>"]
    for bench in benches:
        have = [(r, fe[bench], _lookup(r, bench)) for r, fe in per_run if bench in fe]
        qids = list(dict.fromkeys(q for _, ev, _ in have for q in ev))
        metrics = [m for m in metric_names() if any(m in ev.get(q, {}) for _, ev, _ in have for q in qids)]
        has_p = any("p_value" in ev.get(q, {}).get("WEAT", {}) for _, ev, _ in have for q in qids)
        # a column per (metric, run), left out where that run has no value for any query
        cols = [(c, ev, r) for c in _columns(metrics, has_p) for r, ev, _ in have
                if any(isinstance(ev.get(q, {}).get(c[2]), dict) and (c[3] == "result" or c[3] in ev[q][c[2]]) for q in qids)]
        ths = "".join(f'<th class="ed-num" title="{escape(tip)}">{escape(head)}'
                      + (f"<br><small>{escape(r.title)}</small>" if multi else "") + "</th>"
                      for (head, tip, _, _), _, r in cols)
        rows, blocks = [], []
        for qi, qid in enumerate(qids):
            name = next((f.get("query_name") for _, ev, _ in have for f in ev.get(qid, {}).values()
                         if isinstance(f, dict) and f.get("query_name")), "")
            cells = "".join(_cell(ev.get(qid, {}).get(m), key) for (_, _, m, key), ev, _ in cols)
            sub = f'<br><small class="ed-muted">{escape(name)}</small>' if name else ""
            rows.append(f'<tr><td><a href="#{_anchor(bench, qid)}">{escape(qid)}</a>{sub}</td>{cells}</tr>')
            blocks.append(_query_block(bench, qid, name, have, open_=qi == 0))
        parts.append((f"<h3>{escape(bench)}</h3>" if len(benches) > 1 else "")
                     + f'<div class="ed-scroll-x"><table class="ed-table ed-sortable ed-fair" data-bench="{escape(bench)}">'
                     f'<thead><tr><th>query</th>{ths}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>' + "".join(blocks))
    return "".join(parts)


def _query_block(bench: str, qid: str, name: str, have: list, open_: bool) -> str:
    body, n_charts = [], 0
    for r, ev, lookup in have:
        if qid not in ev:
            continue
        q = _Query(ev[qid], lookup.get(qid) if isinstance(lookup.get(qid), dict) else None)
        head = [f"<h4>{escape(r.title)}</h4>"] if len(have) > 1 else []
        notes = [f'<p class="ed-warn">{escape(why)}</p>' for why in
                 dict.fromkeys(str(f["reason"]) for f in q.fields.values() if isinstance(f, dict) and f.get("reason"))]
        lost = q.lost()
        if lost and not notes:
            notes.append(f'<p class="ed-muted">Not in the embeddings (left out): {escape("; ".join(lost))}</p>')
        cards = []
        for metric, chart in CHARTS:
            f = q.fields.get(metric)
            if isinstance(f, dict):
                svg, caption = chart(q, f, _rnd_distance(r, bench, qid) if metric == "RND" else None)
                if svg:
                    cards.append(f'<div class="ed-plot-card ed-fair-card">{svg}<p class="ed-muted ed-caption">{escape(caption)}</p></div>')
        tail = ['<p class="ed-muted">ECT is a rank correlation over the attribute words: no per-word bars.</p>'] \
            if "ECT" in q.fields and cards else []
        n_charts += len(cards)
        body.append("".join(head + notes) + (f'<div class="ed-plots">{"".join(cards)}</div>' if cards else "") + "".join(tail))
    return (f'<details class="ed-more ed-fair-q" id="{_anchor(bench, qid)}" data-query="{escape(qid)}"'
            f'{" open" if open_ else ""}><summary>{escape(qid)}{" · " + escape(name) if name else ""}'
            f'{"" if n_charts else " <small>(no per-word values)</small>"}</summary>{"".join(body)}</details>')


COVERS_NOTE = ('Its {n} headline numbers (query/metric) are in the <a href="#fairness">Embedding fairness</a> table: '
               "one row per query, one column per metric.")


def report_sections(runs: list) -> list[Section]:
    """The "Embedding fairness" section (none when no run has a WEAT_EVAL.json-shaped file)."""
    html = fairness_section(runs)
    if not html:
        return []
    benches = {b for r in runs for b in fairness_evals(r)}
    covers = {b: frozenset(covered_summary_keys(runs, b)) for b in benches}
    return [Section("Embedding fairness", html, order=20, id="fairness", covers=covers, covers_note=COVERS_NOTE)]
