"""The sweep driver: the same benchmarks on several checkpoints, one report comparing them.

::

    from evaldag.engine.session import RunOptions
    from evaldag.engine.session_sweep import SweepOptions, run_sweep

    code = run_sweep([tofu], [cfg], RunOptions(out="out/"),
                     SweepOptions(models=("ckpt/step-100", "ckpt/step-200"), select="max model_utility"))

:func:`run_sweep` runs each checkpoint through :func:`session.run_benchmarks`, on one cache,
into ``OUT/<name>/``, each with its own copy of the benchmarks' configs (``Benchmark.for_model``),
and writes ``OUT/report.html`` (a column per checkpoint, in the given order) and
``OUT/sweep.json`` (each checkpoint's step, the comparison table, ``--select``'s choice).
With one checkpoint (or none) it is one run, ``OUT`` itself. What runs where -- step order,
adapters grouped by base, ``--shard I/N``, ``--parallel`` under torchrun -- is decided in
``sweep_plan.py``:

* One process: the checkpoints one after another, each a fresh executor, so the previous
  checkpoint's weights are freed before the next loads; the retain and reference models'
  nodes and requests are cached by fingerprint during the first and only read afterwards.
* ``requests`` (torchrun): one after another, every request group sharded over the ranks
  (``distributed/sharded.py``).
* ``checkpoints`` (torchrun): the shared work (retain, reference) once with all ranks, then
  whole checkpoints per rank, without collectives, each rank writing its own; run.json's
  ``sweep`` block records the mode, why, and each rank's checkpoints.
* A shard (``--shard I/N``, a job array on one shared cache) runs its share into the folders
  the whole sweep would use; ``cache/shards.py`` warns when two jobs hold one index.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import checkpoints, selection, sweep_plan
from .adapters.hf.hf_peft import release_shared_base
from .benchmark import pareto_of
from .cache import CacheWriteError
from .cache.safety import NotACache, cache_root, root_state, writable, write_marker
from .cache.shards import ShardRecord, sweep_id
from .distributed.group import RankFailure
from .distributed.sharded import cache_reads
from .outputs import NotOurs, check_names, staged
from .redact import redact_text
from .report import write_report_html
from .session import RunOptions, run_benchmarks
from .sweepdir import SWEEP_FILE, comparison, sweep_record, table_text


@dataclass(frozen=True)
class SweepOptions:
    """Which checkpoints, and how to run them.

    ``models``: the checkpoint specs, expanded (``sweep_plan.expand_models``), each once.
    ``shard``: (I, N), this job's share. ``parallel``: ``auto``, ``checkpoints`` or
    ``requests`` under torchrun. ``select``: a rule picking the best checkpoint
    (``selection.py``), its names checked before anything runs against ``metric_names``
    (the metrics the run computes; empty: against the SUMMARY after the run). ``step_of``:
    ``NAME=N`` steps of checkpoints that do not say theirs. ``adapter_base``: the base of
    adapter folders (``--adapter-base``)."""

    models: tuple[str | None, ...] = (None,)
    shard: tuple[int, int] | None = None
    parallel: str = "auto"
    select: str | None = None
    step_of: tuple[str, ...] = ()
    adapter_base: str | None = None
    metric_names: tuple[str, ...] = ()


def for_model(benches: Sequence[Any], cfgs: Sequence[Any], spec: str | None) -> list[Any]:
    """Each benchmark's config for the checkpoint ``spec`` (a copy; the given ones are not changed)."""
    return [b.for_model(cfg, spec) for b, cfg in zip(benches, cfgs)]


def run_sweep(benches: Sequence[Any], cfgs: Sequence[Any], options: RunOptions = RunOptions(),
              sweep: SweepOptions = SweepOptions(), group: Any = None) -> int:
    """The checkpoints of ``sweep`` evaluated by ``benches`` (one run when there is one);
    the exit code is the worst run's."""
    benches, models = list(benches), [m for m in sweep.models]
    if sweep.shard is not None:  # one share of the sweep, laid out as the whole sweep would be
        shard = sweep.shard
        if models == [None] or not models:
            print("evaldag: error: --shard needs the checkpoints of the sweep (--model, repeated, a glob or @FILE)",
                  file=sys.stderr)
            return 2
        mine, names = sweep_plan.take_shard(models, shard)
        if not mine:
            print(f"evaldag: shard {shard[0]}/{shard[1]} has no checkpoints (fewer checkpoints than shards); "
                  "nothing to do", file=sys.stderr)
            return 0
        record = shard_record(options, sweep, benches, group)
        try:
            return _sweep(benches, list(cfgs), options, sweep, group, mine, names)
        finally:
            if record is not None:
                record.leave()
    if len(models) < 2:  # one run (the usual case)
        spec = models[0] if models else None
        return run_benchmarks(benches, for_model(benches, cfgs, spec), options, group).code
    return _sweep(benches, list(cfgs), options, sweep, group, models)


def shard_record(options: RunOptions, sweep: SweepOptions, benches: list, group: Any) -> ShardRecord | None:
    """This shard's record in the cache (cache/shards.py), after warning about any other process
    holding the same index of the same sweep; None when not sharded (or not rank 0)."""
    shard = sweep.shard
    if shard is None or (group is not None and not group.is_writer):
        return None
    try:
        root = cache_root(options.cache_dir)
    except NotACache:  # the run itself says why, in its one line
        return None
    state = root_state(root)
    if state == "new":  # what the run would do first: mark it, so the record does not make it "foreign"
        write_marker(root)
    record = ShardRecord(root, sweep_id(list(sweep.models), [b.name for b in benches], shard[1]), *shard)
    for other in record.enter(read_only=state not in ("new", "marked") or not writable(root)):
        print(f"evaldag: warning: shard {shard[0]}/{shard[1]} of this sweep is also being run by {other} (its record "
              f"in {record.dir}): both compute the same checkpoints and one share may be left undone; check the "
              "job array's indices (the cache stays correct)", file=sys.stderr)
    return record


def _sweep(benches: list, cfgs: list, options: RunOptions, sweep: SweepOptions, group: Any, models: list[str],
           names: list[str] | None = None) -> int:
    """Every checkpoint's run into ``OUT/<name>/`` and one ``OUT/report.html``; the exit code is
    the worst run's. ``names``: the folder names (a shard's come from the whole sweep's list)."""
    out = options.out_dir
    note = None if options.quiet else (lambda text: print(f"evaldag: note: {text}", file=sys.stderr))
    try:
        check_names(out, ["report.html", SWEEP_FILE])  # the sweep's report must not replace a page evaldag did not write
        if sweep.select:  # the rule read and its names checked against the benchmarks' metrics before anything runs
            parsed = selection.parse(sweep.select, pareto_of(benches))
            if sweep.metric_names:  # a benchmark without a menu: the names are checked against its SUMMARY after the run
                selection.check_names(parsed, sorted(set(sweep.metric_names)))
        p = sweep_plan.plan(models, names=names, step_of=sweep.step_of, adapter_base=sweep.adapter_base,
                            parallel=sweep.parallel, world=None if group is None else group.world,
                            cache_reads=cache_reads() if group is not None else "all", note=note)
    except (NotOurs, ValueError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    options.emit("sweep", plan=p)  # the checkpoints in run order, the parallel mode and why
    each = dataclasses.replace(options, report=False, provenance={**options.provenance, **p.provenance})
    writer = group is None or group.is_writer
    if writer and not options.quiet:
        mode_line = f"evaldag: sweep: {len(p.models)} checkpoints on {group.world} ranks, {p.mode} ({p.why})" if group else None
        for line in filter(None, [p.note, mode_line]):
            print(line, file=sys.stderr)
    if p.ranks is None:
        codes = []
        for m in p.order:  # one run per checkpoint, each with its own configs
            _next_base(m, sweep.adapter_base)
            codes.append(_one(benches, cfgs, each, m, p.names[m], group))
            if codes[-1] in (2, 130) or (group is not None and group.broken):
                return codes[-1]
        code = max(codes)
    else:
        code = _by_checkpoint(benches, cfgs, each, sweep, group, p.order, p.ranks[group.rank], p.names)
        if code in (2, 130) or group.broken:
            return code
    if writer:  # one report, a column per checkpoint, and sweep.json: OUT's set (no older run's files shown)
        shown = [p.names[m] for m in p.models]  # the step order, whatever order they ran in
        table = comparison([(n, out / n) for n in shown])
        try:
            with staged(out) as stage:
                write_report_html([out / n for n in shown], stage / "report.html")
                record = sweep_record(shown, p.models, [b.name for b in benches], table)
                add_steps(record, p.models, shown, sweep, options.quiet, pareto_of(benches))
                (stage / SWEEP_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        except (CacheWriteError, NotOurs, ValueError) as e:
            print(f"evaldag: error: {e}", file=sys.stderr)
            return 2
        if not options.quiet:  # the sweep ends with the table that compares its checkpoints
            print(f"\n{table_text(table, shown)}\n")
            print(f"evaldag: {len(p.models)} checkpoints -> {out / 'report.html'}, {out / SWEEP_FILE}")
    return code


def _one(benches: list, cfgs: list, options: RunOptions, spec: str, name: str, group: Any) -> int:
    """One checkpoint's run into ``OUT/<name>/``."""
    o = dataclasses.replace(options, out=options.out_dir / name, label=f"{name} ({redact_text(spec)})")
    return run_benchmarks(benches, for_model(benches, cfgs, spec), o, group).code


def _by_checkpoint(benches: list, cfgs: list, options: RunOptions, sweep: SweepOptions, group: Any, order: list[str],
                   mine: list[str], names: dict[str, str]) -> int:
    """``--parallel checkpoints``: the shared work with every rank, then this rank's own
    checkpoints alone; every rank's worst exit code, agreed at the end."""
    code = run_benchmarks(benches, for_model(benches, cfgs, order[0]), options, group, shared_only=True).code
    if code in (2, 130) or group.broken:
        return code
    codes = [code]
    for m in mine:
        _next_base(m, sweep.adapter_base)
        codes.append(_one(benches, cfgs, options, m, names[m], None))
        if codes[-1] in (2, 130):
            break
    try:  # the slowest rank sets the pace: waiting here is bounded by EVALDAG_DIST_TIMEOUT
        return max(c[0] for c in group.gather_ints([max(codes)], "the end of the checkpoint-parallel sweep"))
    except RankFailure as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 1


def add_steps(record: dict, models: list[str], names: list[str], sweep: SweepOptions, quiet: bool = False,
              pareto: tuple | None = None) -> dict:
    """The sweep record (``sweepdir.sweep_record``) with each checkpoint's ``step`` and
    ``step_from``, and with the ``select`` rule's ``"selected"`` (the choice printed, with why;
    ``pareto``: a bare pareto's axes, the benchmarks' trade-off)."""
    steps = {c.name: c for c in checkpoints.order(models, names, list(sweep.step_of) or None)}
    for row in record.get("checkpoints", []):
        cp = steps.get(row.get("name"))
        row.update(step=cp.step if cp else None, step_from=cp.step_from if cp else None)
    rule = sweep.select
    if not rule:
        return record
    rows = [(n, checkpoints.flat(record.get("table", {}), n)) for n in names]
    try:
        chosen = selection.select(rule, rows, pareto)
    except selection.RuleError as e:  # the runs and the report are kept; only the choice is missing
        print(f"evaldag: error: {e}", file=sys.stderr)
        record["selected"] = {"rule": rule, "error": str(e)}
        return record
    record["selected"] = chosen.to_json()
    if not quiet:
        print(f"evaldag: selected {', '.join(chosen.chosen) or 'nothing'} by {rule!r}: {chosen.why}")
    return record


_current: list = [None]  # the base of the adapter run last in this process


def _next_base(spec: str, adapter_base: str | None) -> None:
    """Past the last adapter of a base: free that base before the next model loads."""
    base = sweep_plan.base_of(spec, adapter_base)
    if base != _current[0]:
        release_shared_base()
    _current[0] = base
