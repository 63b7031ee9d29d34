"""What a sweep runs, and where: the one module that decides it.

A sweep's checkpoints are expanded from their specs (folders, hub ids, globs, ``@FILE``),
named (``OUT/<name>/``), cut to a shard (``--shard I/N``: every N-th from the I-th, named as
the whole sweep names them), ordered by training step, grouped so adapters of one base run
next to each other, and, under torchrun, either run one after another by every rank
(``requests``: each checkpoint's batches spread over the ranks) or dealt out whole to the
ranks (``checkpoints``). Everything here reads the specs and the files alone, identically on
every rank, with no collective; ``session_sweep.py`` runs what :func:`plan` returns.

A spec with a scheme (``openai:http://h/v1?x=[1]``, ``hf:./ckpt*``) is one model, never
globbed or read as a file.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import checkpoints
from .adapters.hf import is_adapter_dir
from .adapters.hf.hf_peft import AdapterError, adapter_config
from .adapters.spec import has_scheme
from .distributed.checkpoints import assign, choose_mode
from .redact import redact_text


def expand_models(values: list[str] | tuple[str, ...] | None) -> list[str]:
    """The checkpoints named by ``--model`` values, in order, each once."""
    out: list[str] = []
    for v in values or []:
        if has_scheme(v):
            out.append(v)
        elif v.startswith("@"):
            lines = (x.strip() for x in Path(v[1:]).read_text().splitlines())
            out += [x for x in lines if x and not x.startswith("#")]
        elif any(c in v for c in "*?["):
            hits = sorted(glob.glob(v), key=_natural)  # step-2 before step-10
            if not hits:
                raise FileNotFoundError(f"--model {v!r} matches no checkpoint")
            out += hits
        else:
            out.append(v)
    return list(dict.fromkeys(out))


def folder_names(models: list[str]) -> list[str]:
    """An output folder name per checkpoint: its last path part, longer where two would clash."""
    models = [redact_text(m) for m in models]  # a password or key in a server's URL names no folder
    parts = [Path(m.rstrip("/")).parts or (m,) for m in models]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = [re.sub(r"[^\w.+-]+", "-", "-".join(p[-depth:])).strip("-") or "model" for p in parts]
        if len(set(names)) == len(names):
            return names
    return [f"{i:02d}-{Path(m).name}" for i, m in enumerate(models)]


def _natural(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def take_shard(models: list[str], shard: tuple[int, int]) -> tuple[list[str], list[str]]:
    """Shard I of N's checkpoints, every N-th from the I-th of the whole list, with the folder
    names the whole sweep gives them: the shards' --out folders together hold exactly what one
    sweep's --out would, so `evaldag report` over them is the whole sweep's report."""
    i, n = shard
    names = folder_names(models)
    return models[i::n], names[i::n]


def base_of(spec: str, adapter_base: str | None) -> str | None:
    """The base an adapter folder runs on (``--adapter-base`` first), None for a plain checkpoint."""
    spec = spec.removeprefix("vllm:")  # vllm:ADAPTER_DIR: LoRA requests of its base's one engine, grouped the same
    if not is_adapter_dir(spec):
        return None
    if adapter_base:
        return adapter_base
    try:
        return str(adapter_config(spec).get("base_model_name_or_path"))
    except AdapterError:
        return None  # refused with its one line when its run builds


def by_base(models: list[str], adapter_base: str | None = None) -> tuple[list[str], str | None]:
    """The run order (adapters of one base next to each other, groups in order of first
    appearance, plain checkpoints where they stand) and the plan line, None without adapters."""
    bases = {m: base_of(m, adapter_base) for m in models}
    groups: dict[Any, list[str]] = {}
    for i, m in enumerate(models):
        groups.setdefault(("base", bases[m]) if bases[m] else ("plain", i), []).append(m)
    order = [m for ms in groups.values() for m in ms]
    adapters = {b: sum(1 for m in models if bases[m] == b) for b in dict.fromkeys(b for b in bases.values() if b)}
    if not adapters:
        return order, None
    parts = ", ".join(f"{n} over {b}" for b, n in adapters.items())
    return order, (f"evaldag: sweep: {sum(adapters.values())} adapter(s) over {len(adapters)} base(s), run grouped "
                   f"by base, each base loaded once per group: {parts}")


@dataclass
class SweepPlan:
    """A sweep's checkpoints as they will run: ``models`` in step order (the report's columns),
    ``order`` (grouped by base), ``names`` (spec -> folder name), the parallel ``mode`` and why,
    ``ranks`` (each rank's own checkpoints under ``checkpoints``, else None) and the adapter
    ``note`` (None without adapters)."""

    models: list[str]
    order: list[str]
    names: dict[str, str]
    mode: str
    why: str
    ranks: list[list[str]] | None = None
    note: str | None = None
    provenance: dict = field(default_factory=dict)


def plan(models: list[str], *, names: list[str] | None = None, step_of: tuple[str, ...] | list[str] = (),
         adapter_base: str | None = None, parallel: str = "auto", world: int | None = None,
         cache_reads: str = "all", note: Callable[[str], None] | None = None) -> SweepPlan:
    """The sweep of ``models`` (``names``: their folder names, a shard's from the whole list):
    step order, grouped by base, and what each of ``world`` ranks runs (None: one process).
    ``note`` hears the line said when some checkpoints have no step. Raises ValueError."""
    given = dict(zip(models, names or folder_names(models)))
    models = [c.model for c in checkpoints.order(models, folder_names(models), list(step_of) or None, note)]
    order, adapters = by_base(models, adapter_base)
    mode, why = ("sequential", "one process") if world is None else \
        choose_mode(parallel, len(models), world, cache_reads)
    ranks = None  # checkpoints: each rank's own, largest first, then adapters of one base together
    if mode == "checkpoints":
        ranks = [by_base(ms, adapter_base)[0] for ms in assign(order, world)]
    block: dict[str, Any] = {"parallel": mode, "why": why, "checkpoints": [given[m] for m in order]}
    if ranks is not None:
        block["by_rank"] = {str(r): [given[m] for m in ms] for r, ms in enumerate(ranks)}
    return SweepPlan(models, order, given, mode, why, ranks, adapters, {"sweep": block})
