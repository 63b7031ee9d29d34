"""lm-evaluation-harness's own output files, and the report section drawn from them.

``lm_eval_results.json`` is the dict ``simple_evaluate`` returns, without its samples,
and ``lm_eval_samples_<task>.jsonl`` one line per document as its ``--log_samples``
writes them (``doc_id``, ``doc``, ``arguments``, ``resps``, ``filtered_resps``, each
metric's value, ...), so tooling written for lm-evaluation-harness reads them as they
are. The report section is a table per task or group: each metric with its stderr.
"""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import Any

from .nodes import dumps, samples_text

RESULTS = "lm_eval_results.json"


def sample_file(task: str) -> str:
    return f"lm_eval_samples_{re.sub(r'[^A-Za-z0-9_.-]', '_', task)}.jsonl"


def scorer_value(result: Any) -> dict | None:
    """The ``lm_eval`` scorer's value (unnamed: it is in no EVAL/SUMMARY file), or None when it failed."""
    for v in result.graph.order():
        if v.metric.name == "lm_eval":
            try:
                return result.value(v.key)
            except KeyError:
                return None
    return None


def write(result: Any, out_dir: str | Path) -> list[Path]:
    value = scorer_value(result)
    if not value:
        return []
    out = Path(out_dir)
    written = [out / RESULTS]
    written[0].write_text(dumps(value["results"]) + "\n", encoding="utf-8")
    for task in sorted(value.get("samples") or {}):
        p = out / sample_file(task)
        p.write_text(samples_text(value, task), encoding="utf-8")
        written.append(p)
    return written


def _fmt(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, float) else escape(str(x))


def section_html(runs: list[Any]) -> str:
    """One table per run that has lm_eval_results.json: task, metric, filter, value, stderr."""
    parts = []
    for run in runs:
        path = Path(run.path) / RESULTS
        if not path.is_file():
            continue
        try:
            res = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        rows = []
        for task, metrics in (res.get("results") or {}).items():
            shown = metrics.get("alias", task)
            for key, value in metrics.items():
                if "," not in key or "_stderr," in key:
                    continue
                name, flt = key.split(",", 1)
                err = metrics.get(f"{name}_stderr,{flt}")
                hib = (res.get("higher_is_better") or {}).get(task, {}).get(name)
                arrow = "" if hib is None else (" ↑" if hib else " ↓")
                rows.append(f'<tr data-task="{escape(task)}" data-metric="{escape(name)}" data-filter="{escape(flt)}">'
                            f"<td>{escape(str(shown))}</td><td>{escape(name)}{arrow}</td><td>{escape(flt)}</td>"
                            f'<td data-value="{_fmt(value)}">{_fmt(value)}</td><td>{"" if err is None else "± " + _fmt(err)}</td></tr>')
        if not rows:
            continue
        shots = ", ".join(f"{escape(t)}: {n}" for t, n in (res.get("n-shot") or {}).items())
        title = escape(getattr(run, "title", "") or str(run.path))
        parts.append(f'<details class="lmeval" open><summary>{title}: lm-evaluation-harness '
                     f'{escape(str((res.get("config") or {}).get("lm_eval_version", "")))}</summary>'
                     f'<table class="lmeval"><thead><tr><th>task</th><th>metric</th><th>filter</th><th>value</th>'
                     f'<th>stderr</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
                     f'<p class="note">few-shot: {shots or "none"}</p></details>')
    return "".join(parts)
