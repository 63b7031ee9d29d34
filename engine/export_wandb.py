"""``evaldag export DIR... --wandb PROJECT``: the runs' numbers into Weights & Biases.

One W&B run per export: each evaldag run (a sweep's checkpoint, a callback's step) is
logged at its training step (``export.py``'s ``step`` column) as ``<BENCH>/<metric>``, so
W&B draws every metric against the step; the whole long table is logged too
(``evaldag/table``). W&B needs increasing steps: runs without a step are logged in order
after the last known step when none has one, else only in the table (said once).
``wandb`` is an optional extra (``pip install 'evaldag[wandb]'``); ``WANDB_MODE=offline``
writes the run locally (``wandb sync`` uploads it later).
"""

from __future__ import annotations

import math
import sys

WANDB_EXTRA = "pip install 'evaldag[wandb]'"


def by_step(table: list[dict]) -> tuple[list[tuple[int, dict[str, float]]], list[str]]:
    """``[(step, {"BENCH/metric": value})]`` in step order, and the runs left out (no step)."""
    runs: dict[str, dict] = {}
    for r in table:
        entry = runs.setdefault(r["run"], {"step": r.get("step"), "values": {}})
        v = r["value"]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            entry["values"][f"{r['benchmark']}/{r['metric']}"] = float(v)
    if all(e["step"] is None for e in runs.values()):
        return [(i, e["values"]) for i, e in enumerate(runs.values())], []
    stepped = sorted((e["step"], e["values"]) for e in runs.values() if e["step"] is not None)
    return stepped, [name for name, e in runs.items() if e["step"] is None]


def to_wandb(table: list[dict], project: str, name: str | None = None, columns: tuple = ()) -> tuple[str, list[int]]:
    """Log ``table`` (``export.collect``'s rows) to a new W&B run of ``project``; returns the run's
    folder and the steps logged."""
    try:
        import wandb
    except ImportError:
        raise ValueError(f"--wandb needs wandb: {WANDB_EXTRA}") from None
    history, left = by_step(table)
    if left:
        print(f"evaldag: note: no training step for {', '.join(left)}: in the W&B table only, not in its charts",
              file=sys.stderr)
    run = wandb.init(project=project, name=name, job_type="evaldag-export", config={"source": "evaldag export"})
    try:
        for step, values in history:
            run.log(values, step=step)
        cols = list(columns or table[0].keys()) if table else list(columns)
        run.log({"evaldag/table": wandb.Table(columns=cols, data=[[r.get(c) for c in cols] for r in table])})
        return run.dir, [step for step, _ in history]
    finally:
        run.finish()
