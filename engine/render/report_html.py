"""``report.html``: one self-contained page comparing one or more finished runs.

Built from the files a run leaves (``run.json`` and ``<BENCH>_EVAL.json`` /
``_SUMMARY.json``), so it works for runs made elsewhere, and for open-unlearning's own
output folders too (no ``run.json``: no graph or statistics, the rest still shows).
Several folders (checkpoints of one unlearning run, target vs retain model) become
columns side by side; each plot is drawn only when its data exists.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Sequence

from .clusters import guess_split
from .fairness_html import covered_summary_keys, fairness_section
from .html import chips, graph_section, num_cell, page
from .plots import histogram_svg, roc_curve, roc_svg
from .view import fmt_secs, from_run_dir, headline, read_evals, read_json

_PROB = re.compile(r"^(forget|retain)_Q_A_Prob$")


@dataclass
class RunFolder:
    """What one output folder holds, read once."""

    path: Path
    title: str = ""
    subtitle: str = ""
    run: dict | None = None
    evals: dict[str, dict] = field(default_factory=dict)
    summaries: dict[str, dict] = field(default_factory=dict)


def load_run_folder(path: str | os.PathLike) -> RunFolder:
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: not a folder (give the --out folder of a run)")
    rf = RunFolder(p)
    if (p / "run.json").exists():
        rf.run = read_json(p / "run.json")
    rf.evals = read_evals(p)
    for s in sorted(p.glob("*_SUMMARY.json")):
        data = read_json(s)
        if isinstance(data, dict):
            rf.summaries[s.name[: -len("_SUMMARY.json")]] = data
    if rf.run is None and not rf.evals:
        raise FileNotFoundError(f"{p}: neither run.json nor any <BENCH>_EVAL.json here")
    prov = (rf.run or {}).get("provenance") or {}
    model = prov.get("model_path") or prov.get("model_name") or prov.get("model")
    if isinstance(model, str):
        rf.subtitle = model
    elif prov.get("model_fingerprint"):
        rf.subtitle = f"model {prov['model_fingerprint'][:12]}"
    return rf


def _titles(runs: list[RunFolder]) -> None:
    """Column titles: the folder name, with parents added until they are all distinct."""
    depth = 1
    while True:
        names = ["/".join(r.path.resolve().parts[-depth:]) for r in runs]
        if len(set(names)) == len(names) or depth > 6:
            break
        depth += 1
    for r, name in zip(runs, names):
        r.title = name


def _vbi(entry: Any, field_name: str) -> list:
    vbi = entry.get("value_by_index") if isinstance(entry, dict) else None
    if not isinstance(vbi, dict):
        return []
    keys = sorted(vbi, key=lambda k: (len(k), k))
    return [vbi[k].get(field_name) if isinstance(vbi[k], dict) else None for k in keys]


# ---------------------------------------------------------------------- sections
def metrics_section(runs: list[RunFolder]) -> str:
    """One table per benchmark: rows are metrics, columns are runs; headline rows first."""
    out = []
    for bench in sorted({b for r in runs for b in list(r.evals) + list(r.summaries)}):
        # WEAT's SUMMARY is "query/METRIC": the Embedding fairness table shows each of those
        # numbers once, as a query x metric grid; listing them here too would only repeat it
        shown = covered_summary_keys(runs, bench)
        head = sorted({k for r in runs for k in r.summaries.get(bench, {})} - shown)
        rest = sorted({k for r in runs for k, v in r.evals.get(bench, {}).items() if headline(v) is not None} - set(head))
        if shown:
            out.append(f'<h3>{escape(bench)}</h3><p class="ed-muted">Its {len(shown)} headline numbers (query/metric) are '
                       'in the <a href="#fairness">Embedding fairness</a> table: one row per query, one column per metric.</p>')
            if not head + rest:
                continue
        rows = []
        for name in head + rest:
            cells = []
            for r in runs:
                val = r.summaries.get(bench, {}).get(name) if name in head else None
                if val is None:
                    val = headline(r.evals.get(bench, {}).get(name))
                cells.append(num_cell(val if isinstance(val, (int, float)) and not isinstance(val, bool) else None))
            cls = "ed-headline" if name in head else ""
            rows.append(f'<tr class="{cls}"><td>{escape(name)}</td><td>{escape(guess_split(name) or "")}</td>{"".join(cells)}</tr>')
        cols = "".join(f'<th class="ed-num" title="{escape(str(r.path))}">{escape(r.title)}'
                       f'{"<br><small>" + escape(r.subtitle) + "</small>" if r.subtitle else ""}</th>' for r in runs)
        out.append(("" if shown else f"<h3>{escape(bench)}</h3>")
                   + f'<table class="ed-table ed-sortable ed-metrics" data-bench="{escape(bench)}"><thead><tr><th>metric</th>'
                   f"<th>split</th>{cols}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    if not out:
        return '<p class="ed-muted">No metric values found.</p>'
    return '<p class="ed-muted">Headline numbers (the SUMMARY files) in bold, then every other metric\'s agg_value. ' \
           "Click a column to sort.</p>" + "".join(out)


def _mia_curves(evals: dict) -> tuple[list, list[str]]:
    curves, notes = [], []
    for name in sorted(evals):
        e = evals[name]
        if not (isinstance(e, dict) and isinstance(e.get("forget"), dict) and isinstance(e.get("holdout"), dict)):
            continue
        roc = roc_curve(_vbi(e["forget"], "score"), _vbi(e["holdout"], "score"))
        if roc is None:
            continue
        fpr, tpr, auc = roc
        curves.append((name, fpr, tpr, auc))
        stored = e.get("auc", e.get("agg_value"))
        if isinstance(stored, (int, float)) and abs(stored - auc) > 1e-6:
            notes.append(f"{name}: AUC from the scores {auc:.4f} differs from the stored {stored:.4f}")
    return curves, notes


def plot_cards(run: RunFolder) -> dict[str, list[str]]:
    """Plot kind -> SVG cards for one run (a kind is missing when its data is)."""
    cards: dict[str, list[str]] = {}
    for bench, evals in sorted(run.evals.items()):
        prefix = f"{run.title} · {bench}"
        tr = [(n, _vbi(e, "score")) for n, e in sorted(evals.items())
              if "truth_ratio" in n.lower() and guess_split(n) in ("forget", "retain")]
        svg = histogram_svg(tr, title=f"{prefix}: truth ratio, forget vs retain", xlabel="truth ratio (per item)",
                            kind="truth-ratio")
        if svg:
            cards.setdefault("truth-ratio", []).append(svg)
        curves, notes = _mia_curves(evals)
        svg = roc_svg(curves, title=f"{prefix}: membership inference ROC")
        if svg:
            cards.setdefault("roc", []).append(svg + "".join(f'<p class="ed-warn">{escape(t)}</p>' for t in notes))
        probs = [(n, _vbi(e, "prob")) for n, e in sorted(evals.items()) if _PROB.match(n)]
        svg = histogram_svg(probs, title=f"{prefix}: answer probability per item", xlabel="P(answer | question)",
                            kind="prob", lo=0.0, hi=1.0, bins=25, log=False)
        if svg:
            cards.setdefault("prob", []).append(svg)
    return cards


PLOT_TITLES = {
    "truth-ratio": ("Truth ratio", "Per item, forget vs retain. An unlearned model should look like the retain model on forget."),
    "roc": ("Membership inference", "ROC of each attack's per-item scores: forget items are members, holdout items "
            "non-members, a higher score says non-member. AUC near 0.5: the attack cannot tell forget from holdout."),
    "prob": ("Answer probability", "Length-normalised probability of the gold answer, per item."),
}


def plots_section(runs: list[RunFolder], fairness: bool = False) -> str:
    per_run = [plot_cards(r) for r in runs]
    out = []
    for kind, (title, lead) in PLOT_TITLES.items():
        cards = [c for pr in per_run for c in pr.get(kind, [])]
        if cards:
            out.append(f'<h3>{title}</h3><p class="ed-muted">{lead}</p><div class="ed-plots">'
                       + "".join(f'<div class="ed-plot-card">{c}</div>' for c in cards) + "</div>")
    if not out and fairness:
        return '<p class="ed-muted">No per-item data to plot; the per-word bars are under <a href="#fairness">Embedding fairness</a>.</p>'
    return "".join(out) or '<p class="ed-muted">No per-item data to plot.</p>'


def graphs_section(runs: list[RunFolder]) -> str:
    out = []
    for i, r in enumerate(runs):
        if r.run is None:
            out.append(f'<p class="ed-muted">{escape(r.title)}: no run.json (not an evaldag run), no graph.</p>')
            continue
        body = graph_section(from_run_dir(r.path, title=f"{r.title}: run graph"), id_prefix=f"ed{i}")
        if i == 0 or len(runs) == 1:
            out.append(f"<h3>{escape(r.title)}</h3>{body}")
        else:
            out.append(f'<details class="ed-more"><summary>{escape(r.title)}: graph and nodes</summary>{body}</details>')
    return "".join(out)


def _pct(x: Any) -> str | None:
    return f"{x * 100:.1f}%" if isinstance(x, (int, float)) else None


def _secs(x: Any) -> str | None:
    return fmt_secs(x) if isinstance(x, (int, float)) else None


# (row label, value from (run.json, its executor block))
_STATS = [
    ("wall time", lambda run, ex: _secs(run.get("wall_seconds"))),
    ("model loaded", lambda run, ex: {True: "yes", False: "no"}.get(ex.get("model_loaded"))),
    ("requests asked", lambda run, ex: ex.get("requests")),
    ("unique requests", lambda run, ex: ex.get("unique")),
    ("served from request cache", lambda run, ex: ex.get("cached")),
    ("sequences forwarded", lambda run, ex: ex.get("sequences_forwarded")),
    ("generations", lambda run, ex: ex.get("generations")),
    ("batches", lambda run, ex: ex.get("batches")),
    ("OOM retries", lambda run, ex: ex.get("oom_retries")),
    ("tokens (real)", lambda run, ex: ex.get("tokens_real")),
    ("tokens (padded)", lambda run, ex: ex.get("tokens_padded")),
    ("padding", lambda run, ex: _pct(ex.get("padding_fraction"))),
    ("model time", lambda run, ex: _secs(ex.get("seconds"))),
]
_KIND_COLS = ("requests", "unique", "cached", "sequences_forwarded", "batches", "padding_fraction", "seconds")


def _table(head: list[str], rows: list[str], cls: str = "ed-table", num_from: int = 1) -> str:
    ths = "".join(f'<th class="ed-num">{escape(h)}</th>' if i >= num_from else f"<th>{escape(h)}</th>" for i, h in enumerate(head))
    return f'<table class="{cls}"><thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _run_details(r: RunFolder) -> str:
    """Per-run extras: requests by kind, the slowest computed nodes, provenance."""
    parts = [f"<h3>{escape(r.title)}</h3>"]
    kinds = (r.run.get("executor") or {}).get("by_kind") or {}
    if kinds:
        rows = []
        for kind, st in sorted(kinds.items()):
            cells = "".join(num_cell(st.get(c) if isinstance(st.get(c), (int, float)) else None) for c in _KIND_COLS)
            rows.append(f"<tr><td>{escape(kind)}</td>{cells}</tr>")
        parts.append(_table(["request kind"] + [c.replace("_", " ") for c in _KIND_COLS], rows, "ed-table ed-sortable"))
    nodes = r.run.get("nodes") or {}
    slow = sorted((kv for kv in nodes.items() if kv[1].get("status") == "computed"),
                  key=lambda kv: (-(kv[1].get("seconds") or 0.0), kv[0]))[:8]
    if slow:
        rows = [f"<tr><td>{escape(name)}</td><td>{escape(n.get('reason', ''))}</td>"
                f"{num_cell(n.get('seconds'), _secs(n.get('seconds')))}</tr>" for name, n in slow]
        parts.append(_table(["slowest computed nodes", "reason", "seconds"], rows, num_from=2))
    prov = r.run.get("provenance") or {}
    facts = [(k, v if not isinstance(v, str) or len(v) < 20 else v[:16] + "…") for k, v in sorted(prov.items())
             if isinstance(v, (str, int, float))]
    if facts:
        parts.append(chips(facts))
    return "<div>" + "".join(parts) + "</div>"


def stats_section(runs: list[RunFolder]) -> str:
    """Node counts and executor statistics side by side, then per-run details."""
    have = [r for r in runs if r.run is not None]
    if not have:
        return '<p class="ed-muted">No run.json: no run statistics.</p>'
    rows = []
    for status in ("computed", "cached", "failed", "skipped"):
        counts = [sum(1 for n in (r.run.get("nodes") or {}).values() if n.get("status") == status) for r in have]
        rows.append(f"<tr><td>nodes {status}</td>" + "".join(f'<td class="ed-num">{c}</td>' for c in counts) + "</tr>")
    for label, get in _STATS:
        vals = [get(r.run, r.run.get("executor") or {}) for r in have]
        if any(v is not None for v in vals):
            cells = "".join(f'<td class="ed-num">{escape("" if v is None else str(v))}</td>' for v in vals)
            rows.append(f"<tr><td>{escape(label)}</td>{cells}</tr>")
    table = _table(["run statistics"] + [r.title for r in have], rows, "ed-table ed-stats")
    return table + '<div class="ed-grid2">' + "".join(_run_details(r) for r in have) + "</div>"


# ---------------------------------------------------------------------- the page
def build_report_html(out_dirs: Sequence[str | os.PathLike], title: str = "evaldag report") -> str:
    runs = [load_run_folder(p) for p in out_dirs]
    if not runs:
        raise ValueError("give at least one output folder")
    _titles(runs)
    benches = sorted({b for r in runs for b in r.evals})
    fairness = fairness_section(runs)
    nav = ('<nav class="ed-nav"><a href="#metrics">Metrics</a>'
           + ('<a href="#fairness">Embedding fairness</a>' if fairness else "")
           + '<a href="#plots">Plots</a><a href="#graph">Graph</a><a href="#stats">Run statistics</a></nav>')
    body = [nav, chips([("runs", len(runs)), ("benchmarks", ", ".join(benches) or "none")]),
            '<h2 id="metrics">Metrics</h2>', metrics_section(runs)]
    if fairness:
        body += ['<h2 id="fairness">Embedding fairness</h2>', fairness]
    body += ['<h2 id="plots">Plots</h2>', plots_section(runs, bool(fairness)),
             '<h2 id="graph">Graph</h2>', graphs_section(runs),
             '<h2 id="stats">Run statistics</h2>', stats_section(runs)]
    subtitle = " · ".join(r.title + (f" ({r.subtitle})" if r.subtitle else "") for r in runs)
    return page(title, "\n".join(body), subtitle=subtitle)


def write_report_html(out_dirs: Sequence[str | os.PathLike], dest: str | os.PathLike, *, title: str = "evaldag report") -> Path:
    """Write ``report.html`` for ``out_dirs`` (atomically) and return its path."""
    html_text = build_report_html(list(out_dirs), title=title)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_text(html_text, encoding="utf-8")
    os.replace(tmp, dest)
    return dest
