"""A sweep's ``--out`` folder: its checkpoints' run folders, in sweep order, and the table
that compares them.

``evaldag run BENCH --model A --model B`` writes one run folder per checkpoint under OUT
(``OUT/<name>/``), one ``OUT/report.html`` and ``OUT/sweep.json``: the checkpoints in the
order they were given (with the model each one names) and the headline table the sweep
printed. Every command that reads run folders (``report``, ``graph --run``, ``export``)
accepts OUT itself through :func:`run_folders`, so a user never has to list the
checkpoints again. ``sweep.json`` is named outside the ``*_SUMMARY.json`` pattern, so the
report never reads it as a benchmark's results. A folder from before ``sweep.json``
existed (or a user's folder of run folders) still works: its sub-folders that hold a
run, in natural order (``step-2`` before ``step-10``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Sequence

from .outfolder import set_folder
from .redact import redact_text

SWEEP_FILE = "sweep.json"


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def holds_run(folder: Path) -> bool:
    """A run's --out folder: run.json, or an EVAL file (a folder open-unlearning wrote)."""
    here = set_folder(folder)
    return (here / "run.json").is_file() or any(p.exists() for p in here.glob("*_EVAL.json"))


def read_sweep(folder: Path) -> dict | None:
    """``OUT/sweep.json`` as a dict, or None when there is none (or it is not ours)."""
    path = set_folder(folder) / SWEEP_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{folder / SWEEP_FILE}: not valid JSON ({str(e)[:120]})") from None
    return data if isinstance(data, dict) else None


def checkpoints(folder: Path) -> list[tuple[str, Path]]:
    """(checkpoint name, run folder) for each checkpoint of a sweep's OUT, in sweep order."""
    sweep = read_sweep(folder)
    names = [c.get("name") for c in (sweep or {}).get("checkpoints", []) if isinstance(c, dict)]
    subs = [(n, folder / n) for n in names if isinstance(n, str) and "/" not in n and n not in (".", "..")]
    if not subs:
        found = [d for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".") and holds_run(d)]
        subs = [(d.name, d) for d in sorted(found, key=lambda d: _natural(d.name))]
    return [(n, d) for n, d in subs if d.is_dir() and holds_run(d)]


def run_folders(paths: Sequence[str | Path]) -> list[tuple[str, Path]]:
    """(run name, folder) for every run under ``paths``: a run's --out folder is one run;
    a sweep's OUT is each of its checkpoints. Raises FileNotFoundError naming a path that
    is neither."""
    out: list[tuple[str, Path]] = []
    for p in map(Path, paths):
        p = p.parent if p.is_file() and p.name == "run.json" else p
        if not p.is_dir():
            raise FileNotFoundError(f"{p}: no such folder")
        if holds_run(p):
            out.append((p.resolve().name or str(p), p))
            continue
        subs = checkpoints(p)
        if not subs:
            raise FileNotFoundError(f"{p}: not a run folder (no run.json or <BENCH>_EVAL.json in it or in its "
                                    "sub-folders; give the --out folder of a run or of a sweep)")
        out += subs
    names = [n for n, _ in out]
    if len(set(names)) < len(names):  # two folders called `out` in different places: keep them apart
        out = [(str(d), d) for _, d in out]
    return out


def summaries(folder: Path) -> dict[str, dict]:
    """``{BENCH: its SUMMARY.json}`` for one run folder (read from its published set)."""
    here = set_folder(folder)
    out = {}
    for p in sorted(here.glob("*_SUMMARY.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out[p.name[: -len("_SUMMARY.json")]] = data
    return out


def comparison(runs: Sequence[tuple[str, Path]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{BENCH: {metric: {checkpoint: value}}}`` from each run's SUMMARY files (the
    numbers its report leads with), metrics in first-seen order."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for name, folder in runs:
        for bench, summary in summaries(folder).items():
            for metric, value in summary.items():
                table.setdefault(bench, {}).setdefault(metric, {})[name] = value if _number(value) else None
    return table


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.3e}"


def table_text(table: dict[str, dict[str, dict[str, Any]]], names: Sequence[str]) -> str:
    """The comparison as the terminal shows it: a row per metric, a column per checkpoint."""
    width = max([12] + [len(n) + 2 for n in names])
    first = max([22] + [len(m) + 2 for metrics in table.values() for m in metrics])
    lines = []
    for bench, metrics in table.items():
        head = f"{bench:{first}s}" + "".join(f"{n:>{width}s}" for n in names)
        lines += [head, "-" * len(head)]
        for metric, by in metrics.items():
            lines.append(f"  {metric:{first - 2}s}" + "".join(f"{_fmt(by.get(n)):>{width}s}" for n in names))
    return "\n".join(lines)


def sweep_record(names: Sequence[str], models: Sequence[str], benchmarks: Sequence[str],
                 table: dict[str, dict[str, dict[str, Any]]]) -> dict:
    """What ``OUT/sweep.json`` holds: the checkpoints in order, and the table behind the
    comparison (``null`` where a value is missing or not finite: plain JSON); a server's URL
    with its credentials masked."""
    return {"checkpoints": [{"name": n, "model": redact_text(m)} for n, m in zip(names, models)],
            "benchmarks": list(benchmarks), "table": table}


__all__ = ["SWEEP_FILE", "checkpoints", "comparison", "holds_run", "read_sweep", "run_folders", "summaries",
           "sweep_record", "table_text"]
