"""The sections TOFU and MUSE share: "Plots" (truth ratio, membership-inference ROC, answer
probability) and "Generations" (a few greedy answers beside the gold ones, the first look at a new
model).

Drawn from open-unlearning's EVAL shape (``value_by_index`` per item; an MIA's
``forget`` / ``holdout`` sides with per-item ``score``), so it also draws folders that
open-unlearning wrote. Both benchmarks hand the page the same section (drawn from every
EVAL file of that shape); the page shows it once.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from ...engine.render.clusters import Split, guess_split
from ...engine.render.generations import SHOWN, generation_rows
from ...engine.render.interval_cells import INTERVALS, interval_of
from ...engine.render.plots import histogram_svg, roc_curve, roc_svg
from ...engine.render.report_html import RunFolder, Section

_PROB = re.compile(r"^(forget|retain)_Q_A_Prob$")
#: the unlearning splits every metric name points at (``forget_Q_A_Prob``, the MIAs' ``holdout`` rows,
#: ``retain_Truth_Ratio``), top to bottom: TOFU's and MUSE's ``Benchmark.splits``, the bands of their
#: graph drawings and export's ``split`` column, and how this page tells forget plots from retain ones
SPLITS = (Split("forget", rank=0), Split("holdout", rank=10), Split("retain", rank=30))

PLOT_TITLES = {
    "truth-ratio": ("Truth ratio", "Per item, forget vs retain. An unlearned model should look like the retain model on forget. "
                    "The legend's mean is the plain mean of the per-item ratios drawn (geometric on a log axis); "
                    "the table's value aggregates the same items as open-unlearning does, so the two differ."),
    "roc": ("Membership inference", "ROC of each attack's per-item scores: forget items are members, holdout items "
            "non-members, a higher score says non-member. AUC near 0.5: the attack cannot tell forget from holdout."),
    "prob": ("Answer probability", "Length-normalised probability of the gold answer, per item."),
}


def per_item(entry: Any, field_name: str) -> list:
    """``entry["value_by_index"][i][field_name]`` in index order (None where missing)."""
    vbi = entry.get("value_by_index") if isinstance(entry, dict) else None
    if not isinstance(vbi, dict):
        return []
    keys = sorted(vbi, key=lambda k: (len(k), k))
    return [vbi[k].get(field_name) if isinstance(vbi[k], dict) else None for k in keys]


def mia_curves(evals: dict) -> tuple[list, list[str]]:
    curves, notes = [], []
    for name in sorted(evals):
        e = evals[name]
        if not (isinstance(e, dict) and isinstance(e.get("forget"), dict) and isinstance(e.get("holdout"), dict)):
            continue
        roc = roc_curve(per_item(e["forget"], "score"), per_item(e["holdout"], "score"))
        if roc is None:
            continue
        fpr, tpr, auc = roc
        curves.append((name, fpr, tpr, auc))
        stored = e.get("auc", e.get("agg_value"))
        if isinstance(stored, (int, float)) and abs(stored - auc) > 1e-6:
            notes.append(f"{name}: AUC from the scores {auc:.4f} differs from the stored {stored:.4f}")
    return curves, notes


#: how the table's value aggregates the per-item truth ratios (``tofu/spec.py``'s aggregators)
TR_AGGREGATION = {"forget": "mean of min(tr, 1/tr) (closer_to_1_better)", "retain": "mean of max(0, 1 - tr) (true_better)"}


def _table_values(evals: dict, names: list[str]) -> str:
    """Beside the histogram: each series' table value and the aggregation that made it."""
    parts = [f"{n} = {evals[n]['agg_value']:.4g}: {TR_AGGREGATION[guess_split(n, SPLITS)]}" for n in names
             if isinstance(evals[n].get("agg_value"), (int, float)) and guess_split(n, SPLITS) in TR_AGGREGATION]
    return f'<p class="ed-muted">table: {escape("; ".join(parts))}</p>' if parts else ""


def plot_cards(run: RunFolder) -> dict[str, list[str]]:
    """Plot kind -> SVG cards for one run (a kind is missing when its data is)."""
    cards: dict[str, list[str]] = {}
    for bench, evals in sorted(run.evals.items()):
        prefix = f"{run.title} · {bench}"
        tr = [(n, per_item(e, "score")) for n, e in sorted(evals.items())
              if "truth_ratio" in n.lower() and guess_split(n, SPLITS) in ("forget", "retain")]
        svg = histogram_svg(tr, title=f"{prefix}: truth ratio, forget vs retain", xlabel="truth ratio (per item)",
                            kind="truth-ratio")
        if svg:
            cards.setdefault("truth-ratio", []).append(svg + _table_values(evals, [n for n, _ in tr]))
        curves, notes = mia_curves(evals)
        blocks = {n: interval_of(run.evals, bench, n) for n, *_ in curves}  # each AUC's, where the run wrote one
        ivs = {n: b["percentile"] for n, b in blocks.items() if b}
        svg = roc_svg(curves, title=f"{prefix}: membership inference ROC", intervals=ivs)
        if svg:
            cards.setdefault("roc", []).append(svg + "".join(f'<p class="ed-warn">{escape(t)}</p>' for t in notes))
        probs = [(n, per_item(e, "prob")) for n, e in sorted(evals.items()) if _PROB.match(n)]
        svg = histogram_svg(probs, title=f"{prefix}: answer probability per item", xlabel="P(answer | question)",
                            kind="prob", lo=0.0, hi=1.0, bins=25, log=False)
        if svg:
            cards.setdefault("prob", []).append(svg)
    return cards


def plots_html(runs: list[RunFolder]) -> str:
    per_run = [plot_cards(r) for r in runs]
    out = []
    for kind, (title, lead) in PLOT_TITLES.items():
        cards = [c for pr in per_run for c in pr.get(kind, [])]
        if cards:
            out.append(f'<h3>{title}</h3><p class="ed-muted">{lead}</p><div class="ed-plots">'
                       + "".join(f'<div class="ed-plot-card">{c}</div>' for c in cards) + "</div>")
    return "".join(out) or '<p class="ed-muted">No per-item data to plot.</p>'


GENERATIONS_SHOWN = SHOWN  # rows of each generation metric the report shows


def _cut(text: str, n: int = 240) -> str:
    shown = text if len(text) <= n else text[: n - 1] + "…"
    return f'<span title="{escape(text)}">{escape(shown)}</span>' if shown != text else escape(text)


def generations_html(runs: list[RunFolder], shown: int = GENERATIONS_SHOWN) -> str:
    """For each metric with generations (forget_Q_A_ROUGE, MUSE's knowmem/verbmem ROUGE, ...): its
    first ``shown`` items, the question and the gold answer beside each run's generation."""
    out = []
    names = sorted({n for r in runs for evals in r.evals.values() for n, e in evals.items() if generation_rows(e)})
    for name in names:
        per_run = [{k: v for evals in r.evals.values() for k, v in generation_rows(evals.get(name))} for r in runs]
        keys = next((list(rows)[:shown] for rows in per_run if rows), [])
        body = []
        for k in keys:
            first = next(rows[k] for rows in per_run if k in rows)
            cells = "".join(f"<td>{_cut(rows[k]['generation']) if k in rows else ''}</td>" for rows in per_run)
            body.append(f"<tr><td>{escape(k)}</td><td>{_cut(str(first.get('input', '')))}</td>"
                        f"<td>{_cut(first['ground_truth'])}</td>{cells}</tr>")
        head = "".join(f"<th>{escape(r.title)}</th>" for r in runs)
        out.append(f"<h3>{escape(name)}</h3><table class=\"ed-table ed-generations\"><thead><tr><th>item</th><th>prompt</th>"
                   f"<th>gold</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    if not out:
        return ""
    return (f'<p class="ed-muted">The first {shown} items of each metric that generates, greedy, beside the gold '
            "answer: what the model says before any number is read.</p>" + "".join(out))


def _num(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def intervals_html(runs: list[RunFolder]) -> tuple[str, dict]:
    """Each bracketed metric as value ± half the percentile interval, the interval, BCa and the
    items resampled (from ``<GROUP>_INTERVALS_EVAL.json``); the SUMMARY keys it shows."""
    out, covers = [], {}
    for r in runs:
        for group, evals in sorted(r.evals.items()):
            if not group.endswith(INTERVALS) or not evals:
                continue
            covers.setdefault(group, set()).update(evals)
            rows = []
            for name, b in sorted(evals.items()):
                ci, bca = b.get("percentile"), b.get("BCa")
                pm = f" ± {_num((ci[1] - ci[0]) / 2)}" if isinstance(ci, list) and b.get("statistic") != "ks" else ""
                items = ", ".join(f"{k} {v}" for k, v in (b.get("n_items") or {}).items())
                ks = f" (KS statistic {_num(b.get('ks'))}, interval [{_num((b.get('ks_percentile') or [None])[0])}, " \
                     f"{_num((b.get('ks_percentile') or [None, None])[1])}])" if b.get("statistic") == "ks" else ""
                rows.append(f"<tr><td>{escape(name)}</td><td>{_num(b.get('agg_value'))}{pm}</td>"
                            f"<td>{'[' + _num(ci[0]) + ', ' + _num(ci[1]) + ']' if ci else '-'}{escape(ks)}</td>"
                            f"<td>{'[' + _num(bca[0]) + ', ' + _num(bca[1]) + ']' if bca else '-'}</td><td>{escape(items)}</td>"
                            f"<td class=\"ed-muted\">{escape(b.get('reason') or '')}</td></tr>")
            first = next(iter(evals.values()))
            level, n, seed = first.get("confidence_level"), first.get("n_resamples"), first.get("seed")
            out.append(f"<h3>{escape(r.title)} · {escape(group[: -len(INTERVALS)])}</h3>"
                       f'<p class="ed-muted">{_num(100 * level if isinstance(level, float) else None)}% bootstrap intervals over '
                       f"items, {escape(str(n))} resamples, seed {escape(str(seed))} (docs/uncertainty.md).</p>"
                       '<table class="ed-table"><thead><tr><th>metric</th><th>value ± half-width</th><th>percentile</th>'
                       f"<th>BCa</th><th>items</th><th></th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    return "".join(out), covers


def blind_baseline_html(runs: list[RunFolder]) -> str:
    """Each MIA's AUC beside its blind baseline's (``mia_blind_baseline``), and whether it beats it."""
    out = []
    for r in runs:
        for group, evals in sorted(r.evals.items()):
            b = evals.get("mia_blind_baseline")
            if not isinstance(b, dict):
                continue
            blind, aucs = b.get("agg_value"), b.get("mia_auc") or {}
            beaten = set(b.get("beaten_by") or ())
            rows = "".join(f"<tr><td>{escape(n)}</td><td>{_num(a)}</td><td>{_num(blind)}</td>"
                           f"<td class=\"{'' if n in beaten else 'ed-warn'}\">{'beats it' if n in beaten else 'does not beat it'}</td></tr>"
                           for n, a in sorted(aucs.items()))
            out.append(f"<h3>{escape(r.title)} · {escape(group)}</h3>"
                       f'<p class="ed-muted">A model-free classifier ({escape(str(b.get("features")))}, {escape(str(b.get("folds")))}-fold '
                       f"cross-validated, seed {escape(str(b.get('seed')))}) separates the same {escape(str(b.get('members')))} members "
                       f"and {escape(str(b.get('nonmembers')))} non-members with AUC {_num(blind)}. An MIA that does not beat it "
                       "measures the split's distribution shift, not the model's memory.</p>"
                       + ('<table class="ed-table"><thead><tr><th>attack</th><th>AUC</th><th>blind AUC</th><th></th></tr></thead>'
                          f"<tbody>{rows}</tbody></table>" if rows else ""))
    return "".join(out)


def report_sections(runs: list[RunFolder]) -> list[Section]:
    sections = [Section("Plots", plots_html(runs), order=30, id="plots")]
    blind = blind_baseline_html(runs)
    if blind:
        sections.append(Section("Blind MIA baseline", blind, order=31, id="blind-mia"))
    ivs, covers = intervals_html(runs)
    if ivs:
        sections.append(Section("Intervals", ivs, order=20, id="intervals", covers=covers,
                                covers_note="{n} interval rows are in the Intervals section"))
    gens = generations_html(runs)
    if gens:
        sections.append(Section("Generations", gens, order=35, id="generations"))
    return sections
