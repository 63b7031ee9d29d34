"""The report's "Paired tests between runs" section: a sweep's runs tested item by item, each
against the previous one, or each against the first (the baseline: ``against="first"``,
``evaldag report --against first``).

Why: a curve over checkpoints shows every wiggle; most steps between two checkpoints on 40
forget items are inside the noise. Each metric the runs' benchmarks can read item by item
(``Benchmark.item_sample`` on the runs' ``<GROUP>_EVAL.json``) goes through
:func:`uncertainty.paired_series` in the order the runs are given (a sweep's order), and
Holm's adjustment is taken over every pair of every metric shown (:func:`uncertainty.adjust`).
No model runs; the per-item values are the published ones. Shown for runs that asked for
intervals (``--bootstrap-resamples N --seed S``: the same N and S here), since the tests take
seconds per pair (8 s for 31 TOFU metrics at N = 1000 on one busy core).
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any, Sequence

from .render.interval_cells import INTERVALS
from .render.report_html import RunFolder, Section
from .uncertainty import adjust, paired_series

#: resamples and permutations per pair when none is given (compare's default)
RESAMPLES = 1000
RETAIN_WRITTEN = "retain_logs_written"  # run.json: {GROUP: the retain side's file a --retain-model run wrote}


def _num(x: Any, signed: bool = False) -> str:
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return "-"
    return f"{x:+.4g}" if signed else f"{x:.4g}"


def retain_logs_of(meta: Any, group: str, folder: Path | None = None) -> dict | None:
    """The retain model's EVAL file for a run's forget quality and privleak, or None: the retain
    logs it read (``run.json``'s ``provenance.resources.<group>_retain_logs.source``), else the
    retain side it computed with ``--retain-model`` and wrote beside run.json in ``folder``
    (``retain_logs_written``: ``{GROUP: file name}``). Those metrics need the retain model's
    items, which a run's own EVAL file does not hold."""
    res = ((meta.get("provenance") or {}).get("resources") or {}) if isinstance(meta, dict) else {}
    src = (res.get(f"{group.lower()}_retain_logs") or {}).get("source") if isinstance(res, dict) else None
    written = (meta.get(RETAIN_WRITTEN) or {}).get(group.upper()) if isinstance(meta, dict) and isinstance(meta.get(RETAIN_WRITTEN), dict) else None
    if not isinstance(src, str) and folder is not None and isinstance(written, str) and Path(written).name == written:
        src = str(Path(folder) / written)  # a plain name: a file of the run's own set, never a path elsewhere
    if not isinstance(src, str) or not Path(src).is_file():
        return None
    try:
        data = json.loads(Path(src).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def series_rows(runs: Sequence[RunFolder], benches: Sequence[Any], against: str = "previous",
                n_resamples: int = RESAMPLES, seed: int = 0) -> list[dict[str, Any]]:
    """One row per (metric, pair of runs), each with ``benchmark`` and ``metric``; adjusted together."""
    labels = [Path(r.shown or r.path).name for r in runs]
    rows: list[dict[str, Any]] = []
    for bench in benches:
        if not hasattr(bench, "item_sample"):
            continue
        group = bench.group.upper()
        evals = [r.evals.get(group) or {} for r in runs]
        retain = [retain_logs_of(r.run, group, r.path) for r in runs]
        names = list(dict.fromkeys(n for e in evals for n in e))
        for name in names:
            samples = {lab: bench.item_sample(name, e, ret) if isinstance(e.get(name), dict) else None
                       for lab, e, ret in zip(labels, evals, retain)}
            held = {lab: s for lab, s in samples.items() if s is not None}
            if len(held) < 2:
                continue
            ks = {"statistic": "ks"} if next(iter(held.values())).notes.get("statistic") == "ks" else {}
            for row in paired_series(held, against, n_resamples, seed):
                rows.append({"benchmark": group, "metric": name, **row, **ks})
    return adjust(rows)


#: what each run is tested against (``uncertainty.paired_series``), as the section says it
AGAINST = {"previous": "Each run against the previous one", "first": "Each run against the first (the baseline)"}


def check_against(against: str) -> str:
    """``against`` when it is one the section knows; else a ValueError naming the choices."""
    if against not in AGAINST:
        raise ValueError(f"against={against!r}: choose one of {', '.join(AGAINST)}")
    return against


def paired_html(rows: list[dict[str, Any]], against: str = "previous") -> str:
    first = next((r for r in rows if r.get("n_resamples")), {})
    body = "".join(
        f"<tr><td>{escape(r['benchmark'])}/{escape(r['metric'])}{' (KS statistic)' if r.get('statistic') == 'ks' else ''}</td><td>{escape(r['a_run'])} → {escape(r['b_run'])}</td>"
        f"<td>{_num(r.get('delta'), True)}</td><td>{'[' + _num(r['percentile'][0], True) + ', ' + _num(r['percentile'][1], True) + ']' if r.get('percentile') else '-'}</td>"
        f"<td>{_num(r.get('p_value'))}</td><td>{_num(r.get('p_holm'))}</td><td>{_num(r.get('mde'))}</td><td>{r.get('items_needed') or '-'}</td><td>{escape(str(r.get('verdict')))}</td></tr>"
        for r in rows)
    return (f'<p class="ed-muted">{AGAINST[against]} on the items both scored: the paired bootstrap '
            f"interval of B − A ({first.get('n_resamples', RESAMPLES)} resamples, seed {first.get('seed', 0)}), the sign-flip "
            f"permutation p-value, {len(rows)} tests, Holm-adjusted together; mde: the smallest difference found with 80% "
            "power; items: how many items that power needs for this B − A (docs/uncertainty.md).</p>"
            '<table class="ed-table"><thead><tr><th>metric</th><th>A → B</th><th>B − A</th><th>interval</th><th>p</th>'
            f"<th>p (Holm)</th><th>mde</th><th>items</th><th>verdict</th></tr></thead><tbody>{body}</tbody></table>")


def _asked(runs: Sequence[RunFolder]) -> tuple[int, int] | None:
    """The resamples and seed the runs' intervals were drawn with (``<GROUP>_INTERVALS_EVAL.json``),
    or None when a run asked for none: the tests cost seconds per pair, so only runs that asked
    for intervals (``--bootstrap-resamples``) get them."""
    found = None
    for r in runs:
        blocks = [b for g, e in r.evals.items() if g.endswith(INTERVALS) for b in (e or {}).values() if isinstance(b, dict)]
        n = next((b.get("n_resamples") for b in blocks if isinstance(b.get("n_resamples"), int) and b["n_resamples"] > 0), None)
        if n is None:
            return None
        if found is None:
            seed = next((b.get("seed") for b in blocks if isinstance(b.get("seed"), int)), 0)
            found = (n, seed)
    return found


class PairedRuns:
    """A report plugin: the section, for two runs or more that share per-item values."""

    splits: tuple = ()

    def __init__(self, benches: Sequence[Any] = (), against: str = "previous"):
        self.benches = list(benches)
        self.against = check_against(against)

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        asked = _asked(runs)
        if len(runs) < 2 or asked is None:
            return []
        rows = series_rows(runs, self.benches, self.against, n_resamples=asked[0], seed=asked[1])
        if not rows:
            return []
        return [Section("Paired tests between runs", paired_html(rows, self.against), order=16, id="paired-checkpoints")]
