"""Plain-text summaries of a run for the terminal."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TextIO

from ..redact import redact
from ..results import NONFINITE, Result, RunResult


def fmt(x: object) -> str:
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.3e}"
    return "-" if x is None else str(x)


def print_run(result: RunResult, out: Path | None = None, label: str | None = None) -> None:
    """The headline of each benchmark, then the run's counts; ``label`` names the
    checkpoint on each block's title line (a sweep prints one block per checkpoint)."""
    grouped = [g for g in result.graph.groups if g is not None]  # and the run's own metrics (--add-metric), as the files have them
    groups = grouped + [None] if None in result.graph.groups or not grouped else grouped
    width = max([32] + [len(n) for v in result.graph.vertices.values() for _, n in v.names]) + 1
    served = result.served_by()  # with a --fallback: which backend each number came from
    for g in groups:
        if g or label or grouped:
            print(f"== {' · '.join(x for x in (g or 'RUN', label) if x)}")  # RUN: the metrics of RUN_EVAL.json
        for key in result.graph.roots:
            v = result.graph.vertices[key]
            if (v.names[0][0] if v.names else None) != g:
                continue
            name = v.names[0][1] if v.names else v.label
            rec = result.records[key]
            val = result.value(f"{g}/{name}" if g else name) if rec.status in ("computed", "cached") else None
            if val is not None and not isinstance(val, (Result, int, float)):
                continue  # a scorer's raw arrays are no metric value (the files leave them out too)
            agg = val.agg_value if isinstance(val, Result) else val
            blank = agg is None or (isinstance(agg, float) and math.isnan(agg))  # a NaN row says why
            blank = blank or (agg == 0 and not isinstance(agg, bool))  # so does a collapsed aggregate
            noted = isinstance(val, Result) and bool(val.reason) and (blank or val.reason.startswith(NONFINITE))
            why = f"  ({val.reason})" if noted else ""
            why = why or (f"  ({rec.problem})" if rec.problem else "")
            by = served.get(name)
            why = (f"  served by {redact(', '.join(by.values()) if len(by) == 1 else str(by))}" if by else "") + why
            ci = val.extra.get("percentile") if isinstance(val, Result) else None  # an interval node's (uncertainty.py)
            span = f" [{fmt(ci[0])}, {fmt(ci[1])}]" if isinstance(ci, list) and len(ci) == 2 else ""
            print(f"  {name:{width}s} {fmt(agg):>12s}{span}   [{rec.status}{', ' + rec.reason if rec.reason else ''}]{why}")
    ex = result.executor
    counts = {s: result.count(s) for s in ("computed", "cached", "failed", "skipped")}
    print(
        f"nodes: {counts['computed']} computed, {counts['cached']} cached, {counts['failed']} failed, {counts['skipped']} skipped"
        f" | requests: {ex.get('requests', 0)} asked, {ex.get('unique', 0)} unique, {ex.get('cached', 0)} from cache,"
        f" {ex.get('sequences_forwarded', 0)} forwarded | padding {100 * ex.get('padding_fraction', 0.0):.1f}%"
        f" | {result.wall_seconds:.2f}s" + (f" ({result.lock_wait_seconds:.0f} s of it waiting for other runs' nodes)"
                                             if result.lock_wait_seconds >= 1 else "")
    )
    for line in truncation_warnings(result):
        print(line)
    print_failures(result, sys.stdout)
    if out is not None:
        print(f"wrote {out}/")


def truncation_warnings(result: RunResult) -> list[str]:
    """One line per root metric whose items had tokens cut by ``max_length``."""
    lines = []
    for key in result.graph.roots:
        v = result.graph.vertices[key]
        if not v.names or result.records[key].status not in ("computed", "cached"):
            continue
        g, name = v.names[0]
        val = result.value(f"{g}/{name}" if g else name)
        cut = _cut_counts(val.to_dict()) if isinstance(val, Result) else []
        if cut:
            where = f" in {g}_EVAL.json" if g else ""
            lines.append(f"warning: {g + '/' if g else ''}{name}: {len(cut)} items truncated to the model's context "
                         f"(up to {max(cut)} tokens cut); see value_by_index[...].truncated_tokens{where}")
    return lines


def print_failures(result: RunResult, file: TextIO | None = None) -> None:
    """One line per failed node, root cause first, then its traceback (indented).

    The CLI prints these whatever the verbosity (with ``--quiet``, to stderr).
    """
    file = file or sys.stderr
    for rec in result.failures():
        print(f"FAILED {rec.name}: {rec.problem}", file=file)
        if "\n" in rec.error.strip():  # a traceback; an InputError's one line is all there is to say
            print("\n".join("    " + line for line in rec.error.rstrip().splitlines()), file=file)


def _cut_counts(block: dict) -> list[int]:
    """``truncated_tokens`` of every item, also of blocks nested one level (MIA forget/holdout)."""
    blocks = [block] + [b for k, b in block.items() if k != "value_by_index" and isinstance(b, dict)]
    return [item["truncated_tokens"] for b in blocks for item in (b.get("value_by_index") or {}).values()
            if isinstance(item, dict) and "truncated_tokens" in item]
