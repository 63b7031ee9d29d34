"""The report's "Training curves" section, for runs that are checkpoints of one training run.

When at least two of the report's runs have a training step (``sweep.json`` beside them,
``trainer_state.json`` in the model folder run.json names, a ``checkpoint-N``/``step-N``
name: ``checkpoints.py``), the page gains each headline metric against the step and, when a
benchmark the runs ran declares a trade-off (``Benchmark.tradeoff``; TOFU's: forget quality
on a log scale against model utility) and the runs have both names, that figure: the
reference model's runs and the target marked (a run of the reference's folder; a run without
a step), the Pareto front joined (``selection.py``'s ``pareto``). Drawn by
``render/curves.py``; it reads only the already-loaded run folders and the sweep's own
``sweep.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from . import selection
from .checkpoints import run_step
from .render.curves import curve_svg, tradeoff_svg
from .render.interval_cells import INTERVALS  # the interval files' group suffix
from .render.report_html import RunFolder, Section


def _model(r: RunFolder, role: str = "model") -> str:
    res = ((r.run or {}).get("provenance") or {}).get("resources") or {}
    d = res.get(role) if isinstance(res, dict) else None
    return str(d.get("path") or "") if isinstance(d, dict) else ""


def _name(r: RunFolder) -> str:
    return Path(r.shown or r.path).name


def _numbers(r: RunFolder) -> dict[str, float | None]:
    out: dict[str, Any] = {}
    for summary in r.summaries.values():
        for k, v in (summary or {}).items():
            out.setdefault(k, selection._number(v))
    return out


def _block(r: RunFolder, metric: str) -> dict:
    for group, evals in sorted(r.evals.items()):
        if group.endswith(INTERVALS) and isinstance((evals or {}).get(metric), dict):
            return evals[metric]
    return {}


def _interval(r: RunFolder, metric: str) -> list | None:
    """The metric's percentile interval from the run's ``<GROUP>_INTERVALS_EVAL.json`` (None: none written)."""
    return _block(r, metric).get("percentile")


def _level(stepped: list, metric: str) -> float:
    levels = [_block(r, metric).get("confidence_level") for r, *_ in stepped]
    return next((v for v in levels if isinstance(v, float)), 0.95)


class TrainingCurves:
    """A report plugin (``render.report_html.ReportPlugin``) that is no benchmark; ``tradeoffs``:
    those the runs' benchmarks declare (the first one the runs have both names of is drawn)."""

    splits: tuple = ()

    def __init__(self, tradeoffs: Sequence[Any] = ()):
        self.tradeoffs = list(dict.fromkeys(tradeoffs))

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        rows = []
        for r in runs:
            name = _name(r)
            rows.append((r, name, run_step(name, Path(r.shown or r.path), _model(r)), _numbers(r)))
        stepped = [x for x in rows if x[2] is not None]
        if len(stepped) < 2:
            return []
        metrics = list(dict.fromkeys(k for *_, nums in stepped for k, v in nums.items() if v is not None))
        bars = {m: {s: b for r, _, s, _ in stepped if (b := _interval(r, m)) is not None} for m in metrics}
        charts = [c for m in metrics if (c := curve_svg(m, [(s, nums.get(m)) for _, _, s, nums in stepped], bars=bars[m],
                                                        level=_level(stepped, m)))]
        trade = self._tradeoff(rows)
        html = '<div class="ed-curves">' + "\n".join(([trade] if trade else []) + charts) + "</div>"
        return [Section("Training curves", html, order=15, id="curves")]

    def _tradeoff(self, rows: list) -> str | None:
        t = next((t for t in self.tradeoffs if any(t.x in n and t.y in n for *_, n in rows)), None)
        if t is None:
            return None
        reference = {_model(r, t.reference) for r, *_ in rows} - {""} if t.reference else set()
        points = []
        for r, name, step, nums in rows:
            kind = "reference" if _model(r) in reference else "checkpoint" if step is not None else "target"
            points.append((name, nums.get(t.x), nums.get(t.y), kind))
        try:
            front = selection.select(f"pareto max {t.y}, max {t.x}",
                                     [(n, nums) for _, n, s, nums in rows if s is not None]).chosen
        except selection.RuleError:
            front = []
        return tradeoff_svg(points, front, x_name=t.x, y_name=t.y, reference_label=t.reference_label)
