"""The report's "Training curves" section, for runs that are checkpoints of one training run.

When at least two of the report's runs have a training step (``sweep.json`` beside them,
``trainer_state.json`` in the model folder run.json names, a ``checkpoint-N``/``step-N``
name: ``checkpoints.py``), the page gains each headline metric against the step and, when
the runs have ``forget_quality`` and ``model_utility``, TOFU's trade-off figure: forget
quality on a log scale against model utility, the retain model and the target marked (a
run of the retain model's folder; a run without a step), the Pareto front joined
(``selection.py``'s ``pareto``). Drawn by ``render/curves.py``; it reads only the
already-loaded run folders and the sweep's own ``sweep.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import selection
from .checkpoints import run_step
from .render.curves import curve_svg, tradeoff_svg
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


class TrainingCurves:
    """A report plugin (``render.report_html.ReportPlugin``) that is no benchmark."""

    splits: tuple = ()

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        rows = []
        for r in runs:
            name = _name(r)
            rows.append((r, name, run_step(name, Path(r.shown or r.path), _model(r)), _numbers(r)))
        stepped = [x for x in rows if x[2] is not None]
        if len(stepped) < 2:
            return []
        metrics = list(dict.fromkeys(k for *_, nums in stepped for k, v in nums.items() if v is not None))
        charts = [c for m in metrics if (c := curve_svg(m, [(s, nums.get(m)) for _, _, s, nums in stepped]))]
        trade = self._tradeoff(rows)
        html = '<div class="ed-curves">' + "\n".join(([trade] if trade else []) + charts) + "</div>"
        return [Section("Training curves", html, order=15, id="curves")]

    @staticmethod
    def _tradeoff(rows: list) -> str | None:
        if not any("forget_quality" in n and "model_utility" in n for *_, n in rows):
            return None
        retain = {_model(r, "retain_model") for r, *_ in rows} - {""}
        points = []
        for r, name, step, nums in rows:
            kind = "retain" if _model(r) in retain else "checkpoint" if step is not None else "target"
            points.append((name, nums.get("model_utility"), nums.get("forget_quality"), kind))
        try:
            front = selection.select("pareto", [(n, nums) for _, n, s, nums in rows if s is not None]).chosen
        except selection.RuleError:
            front = []
        return tradeoff_svg(points, front)
