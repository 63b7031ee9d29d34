"""Running a sweep (``--model`` repeated): the order, the parallel mode, one report.

* Adapters are run grouped by base (the order of first appearance), so each base is loaded
  once in a row of its adapters (``adapters/hf_peft.py`` keeps one base at a time); the
  plan line says so when a sweep holds adapters.
* One process: the checkpoints one after another (``sweep.py``).
* Under torchrun, ``--parallel requests`` runs them one after another with every request
  group sharded over the ranks (``distributed/sharded.py``); ``--parallel checkpoints``
  computes the shared work (retain, reference) once with all ranks, then gives each rank
  whole checkpoints (``distributed/checkpoints.py``), run without collectives, each rank
  writing its own to the cache and to ``OUT/<name>/``; ``auto`` (the default) picks by the
  number of checkpoints against the number of ranks. run.json's ``sweep`` block records the
  mode, why, and each rank's checkpoints.
* Rank 0 (or the one process) writes ``OUT/report.html``, a column per checkpoint, in the
  command line's order.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from ..adapters.hf import is_adapter_dir
from ..adapters.hf_peft import AdapterError, adapter_config, release_shared_base
from ..cache import CacheWriteError
from ..distributed.checkpoints import assign, choose_mode
from ..distributed.group import RankFailure
from ..distributed.sharded import cache_reads
from ..outputs import NotOurs, check_names, staged
from ..report import write_report_html
from ..redact import redact_text
from ..sweepdir import SWEEP_FILE, comparison, sweep_record, table_text
from .models import for_model
from . import sweep
from .sweep import folder_names


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


def run_sweep(args: argparse.Namespace, benches: list, group: Any, out: Path, models: list[str],
              one: Callable[..., int], names: list[str] | None = None) -> int:
    """Every checkpoint's run into ``OUT/<name>/`` and one ``OUT/report.html``; the exit code is
    the worst run's. ``names``: the folder names (a shard's come from the whole sweep's list)."""
    try:
        check_names(out, ["report.html", SWEEP_FILE])  # the sweep's report must not replace a page evaldag did not write
        models = sweep.by_step(models, args, benches)  # training-step order; --select read (issue 32)
        order, note = by_base(models, getattr(args, "adapter_base", None))
        mode, why = ("sequential", "one process") if group is None else \
            choose_mode(getattr(args, "parallel", "auto"), len(models), group.world, cache_reads())
    except (NotOurs, ValueError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    names = dict(zip(models, names or folder_names(models)))
    ranks = None  # checkpoints: each rank's own, largest first, then adapters of one base together
    if mode == "checkpoints":
        ranks = [by_base(ms, getattr(args, "adapter_base", None))[0] for ms in assign(order, group.world)]
    block = {"parallel": mode, "why": why, "checkpoints": [names[m] for m in order]}
    if ranks is not None:
        block["by_rank"] = {str(r): [names[m] for m in ms] for r, ms in enumerate(ranks)}
    args.sweep_provenance = {"sweep": block}  # run.json of every checkpoint (cli/run.py)
    writer = group is None or group.is_writer
    if writer and not args.quiet:
        mode_line = f"evaldag: sweep: {len(models)} checkpoints on {group.world} ranks, {mode} ({why})" if group else None
        for line in filter(None, [note, mode_line]):
            print(line, file=sys.stderr)
    if ranks is None:
        codes = []
        for m in order:  # one run per checkpoint, each its own Namespace
            _next_base(m, args)
            codes.append(one(for_model(args, m), benches, group, out / names[m], report=False, label=f"{names[m]} ({redact_text(m)})"))
            if codes[-1] in (2, 130) or (group is not None and group.broken):
                return codes[-1]
        code = max(codes)
    else:
        code = _by_checkpoint(args, benches, group, out, order, ranks[group.rank], names, one)
        if code in (2, 130) or group.broken:
            return code
    if writer:  # one report, a column per checkpoint, and sweep.json: OUT's set (no older run's files shown)
        shown = [names[m] for m in models]  # the command line's order, whatever order they ran in
        table = comparison([(n, out / n) for n in shown])
        try:
            with staged(out) as stage:
                write_report_html([out / n for n in shown], stage / "report.html")
                record = sweep_record(shown, models, [b.name for b in benches], table)
                sweep.add_steps(record, models, shown, args)  # each checkpoint's step; --select's choice
                (stage / SWEEP_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        except (CacheWriteError, NotOurs, ValueError) as e:
            print(f"evaldag: error: {e}", file=sys.stderr)
            return 2
        if not args.quiet:  # the sweep ends with the table that compares its checkpoints
            print(f"\n{table_text(table, shown)}\n")
            print(f"evaldag: {len(models)} checkpoints -> {out / 'report.html'}, {out / SWEEP_FILE}")
    return code


def _by_checkpoint(args: argparse.Namespace, benches: list, group: Any, out: Path, order: list[str], mine: list[str],
                   names: dict[str, str], one: Callable[..., int]) -> int:
    """``--parallel checkpoints``: the shared work with every rank, then this rank's own
    checkpoints alone; every rank's worst exit code, agreed at the end."""
    code = one(for_model(args, order[0]), benches, group, out, report=False, shared_only=True)
    if code in (2, 130) or group.broken:
        return code
    codes = [code]
    for m in mine:
        _next_base(m, args)
        codes.append(one(for_model(args, m), benches, None, out / names[m], report=False, label=f"{names[m]} ({redact_text(m)})"))
        if codes[-1] in (2, 130):
            break
    try:  # the slowest rank sets the pace: waiting here is bounded by EVALDAG_DIST_TIMEOUT
        return max(c[0] for c in group.gather_ints([max(codes)], "the end of the checkpoint-parallel sweep"))
    except RankFailure as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 1


_current: list = [None]  # the base of the adapter run last in this process


def _next_base(spec: str, args: argparse.Namespace) -> None:
    """Past the last adapter of a base: free that base before the next model loads."""
    base = base_of(spec, getattr(args, "adapter_base", None))
    if base != _current[0]:
        release_shared_base()
    _current[0] = base
