"""Checkpoints ordered by training step: a sweep's order and the steps ``sweep.json`` records.

A checkpoint's step comes from, in this order: ``--step-of NAME=N`` (NAME: the checkpoint's
output folder name, or its path as given), the ``global_step`` of the ``trainer_state.json``
the Trainer writes into each ``checkpoint-N`` folder, or a name ending in ``checkpoint-N``,
``step-N``, ``step_N``, ``ckpt-N`` or ``global_stepN``. Checkpoints without a step come
after the others, by name, and that is said once; when none has a step (a sweep of
unrelated models) they keep the order given.

``sweep.json`` (``sweepdir.py``) lists the checkpoints in this order, each with its ``step``
and ``step_from``, plus ``"selected"`` when a ``--select`` rule was given (selection.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

_NAME_STEP = re.compile(r"(?:checkpoint|step|ckpt|global_step)[-_]?(\d+)$", re.IGNORECASE)


@dataclass
class Checkpoint:
    name: str  # the output folder name
    model: str  # the model spec as given
    step: int | None = None
    step_from: str | None = None  # "--step-of", "trainer_state.json" or "name"


def parse_step_of(values: Sequence[str] | None) -> dict[str, int]:
    """``["a=10", "ckpt/b=20"]`` -> ``{"a": 10, "ckpt/b": 20}``; a bad value is one ValueError."""
    out: dict[str, int] = {}
    for v in values or []:
        name, sep, num = v.rpartition("=")
        if not sep or not name or not re.fullmatch(r"\d+", num.strip()):
            raise ValueError(f"--step-of {v!r}: expected NAME=STEP with STEP a whole number, e.g. final=1200")
        out[name.strip()] = int(num)
    return out


def _trainer_state_step(model: str) -> int | None:
    try:
        data = json.loads((Path(model).expanduser() / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None
    step = data.get("global_step") if isinstance(data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def step_of(name: str, model: str, given: dict[str, int]) -> tuple[int | None, str | None]:
    for key in (name, model, model.rstrip("/")):
        if key in given:
            return given[key], "--step-of"
    step = _trainer_state_step(model)
    if step is not None:
        return step, "trainer_state.json"
    for text in (Path(model.rstrip("/")).name, name):
        m = _NAME_STEP.search(text)
        if m:
            return int(m.group(1)), "name"
    return None, None


def order(models: Sequence[str], names: Sequence[str], step_values: Sequence[str] | None = None,
          note: Any = None) -> list[Checkpoint]:
    """The checkpoints by step (equal steps: by name); those without a step after them, by name, and
    ``note(text)`` once. When none has a step (models, not one run's checkpoints) the order given."""
    given = parse_step_of(step_values)
    known = set(names) | set(models) | {m.rstrip("/") for m in models}
    unknown = [k for k in given if k not in known]
    if unknown:
        raise ValueError(f"--step-of {unknown[0]}=...: no checkpoint of this sweep is named {unknown[0]!r} "
                         f"(names: {', '.join(names)})")
    cps = [Checkpoint(n, m, *step_of(n, m, given)) for n, m in zip(names, models)]
    stepless = [c.name for c in cps if c.step is None]
    if len(stepless) == len(cps):  # not checkpoints of one training run: the order given, nothing said
        return cps
    if stepless and note is not None:
        note(f"no training step for {', '.join(stepless)} (no trainer_state.json, no checkpoint-N name, no "
             "--step-of NAME=N): ordered by name after the others")
    return sorted(cps, key=lambda c: (c.step is None, c.step if c.step is not None else 0, c.name))


def flat(table: dict[str, dict[str, dict[str, Any]]], name: str) -> dict[str, Any]:
    """One checkpoint's numbers from a sweep's comparison table (``{BENCH: {metric: {name: value}}}``,
    ``sweepdir.comparison``), in one name space for ``--select``: the first benchmark's where two share a name."""
    out: dict[str, Any] = {}
    for metrics in table.values():
        for metric, by in metrics.items():
            out.setdefault(metric, by.get(name))
    return out


def run_step(name: str, folder: Path, model: str) -> int | None:
    """The step of one run folder: its sweep's ``sweep.json`` (the folder above), else :func:`step_of`."""
    try:
        data = json.loads((Path(folder).parent / "sweep.json").read_text())
        for row in data.get("checkpoints", []) if isinstance(data, dict) else []:
            step = row.get("step") if isinstance(row, dict) and row.get("name") == Path(folder).name else None
            if isinstance(step, int) and not isinstance(step, bool):
                return step
    except (OSError, ValueError, AttributeError):
        pass
    return step_of(name, model, {})[0]


def _run_model(folder: Path) -> str:
    """The evaluated model's path as a run folder's run.json records it ('' when it does not)."""
    try:
        res = json.loads((Path(folder) / "run.json").read_text())["provenance"]["resources"]["model"]
        return str(res["path"]) if isinstance(res, dict) and isinstance(res.get("path"), str) else ""
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def order_runs(runs: Sequence[tuple[str, Path]], note: Any = None) -> list[tuple[str, Path]]:
    """Run folders (``evaldag report DIR...``) by training step when some have one (those without
    after them, by name, said once); otherwise the order given."""
    steps = [(name, folder, run_step(name, folder, _run_model(folder))) for name, folder in runs]
    if all(s is None for _, _, s in steps):
        return list(runs)
    stepless = [n for n, _, s in steps if s is None]
    if stepless and note is not None:
        note(f"no training step for {', '.join(stepless)}: ordered by name after the others")
    return [(n, f) for n, f, _ in sorted(steps, key=lambda x: (x[2] is None, x[2] or 0, x[0]))]
