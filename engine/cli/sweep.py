"""``evaldag run BENCH --model A --model B ...``: a sweep of checkpoints in one process (group).

Each checkpoint runs the same graph in turn, on one cache, into ``OUT/<name>/``; one
``OUT/report.html`` compares them, a column per checkpoint. ``--model`` takes folders or
hub ids, globs (``'ckpts/step-*'``) and ``@FILE`` (one checkpoint per line). A spec with
a scheme (``openai:http://h/v1?x=[1]``, ``hf:./ckpt*``) is one model, never globbed or read
as a file.

Models are loaded one at a time: each checkpoint gets a fresh executor, so the previous
checkpoint's weights are freed before the next loads. The retain and reference models
are forwarded once for the whole sweep: their nodes and requests are cached by
fingerprint during the first checkpoint, so later checkpoints read them and do not even
load those models. Under torchrun, every checkpoint's requests are spread over all ranks.

``--shard I/N`` runs one share of that list (a job array: N independent jobs, possibly on N
hosts, on one shared cache; cache/shards.py warns when two jobs hold one index).
"""

from __future__ import annotations

import argparse
import glob
import re
import sys
from pathlib import Path

from .. import checkpoints, selection
from ..adapters.spec import has_scheme
from ..cache.safety import NotACache, cache_root, root_state, writable, write_marker
from ..cache.shards import ShardRecord, sweep_id
from ..redact import redact_text


def expand_models(values: list[str] | None) -> list[str]:
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


def shard_arg(text: str) -> tuple[int, int]:
    """``--shard I/N`` (I counted from 0): argparse's type, so a bad value is one line, exit 2."""
    m = re.fullmatch(r"\s*(-?\d+)\s*/\s*(-?\d+)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N (e.g. 0/4: the first of four shares)")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: N must be at least 1")
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"shard index {i} is out of range for {n} shards (I counts from 0: 0 to {n - 1})")
    return i, n


def glue_shard(argv: list[str]) -> list[str]:
    """``--shard -1/2`` read as ``--shard=-1/2``: argparse takes a value that starts with ``-``
    for an option ("expected one argument"); glued, a negative index gets shard_arg's line."""
    out: list[str] = []
    for word in argv:
        if out and out[-1] == "--shard" and re.match(r"-\d", word):
            out[-1] = f"--shard={word}"
        else:
            out.append(word)
    return out


def take_shard(models: list[str], shard: tuple[int, int]) -> tuple[list[str], list[str]]:
    """Shard I of N's checkpoints, every N-th from the I-th of the whole list, with the folder
    names the whole sweep gives them: the shards' --out folders together hold exactly what one
    sweep's --out would, so `evaldag report` over them is the whole sweep's report."""
    i, n = shard
    names = folder_names(models)
    return models[i::n], names[i::n]


def shard_record(args: argparse.Namespace, shard: tuple[int, int] | None, benches: list, group) -> object:
    """This shard's record in the cache (cache/shards.py), after warning about any other process
    holding the same index of the same sweep; None when not sharded (or not rank 0)."""
    if shard is None or (group is not None and not group.is_writer):
        return None
    try:
        root = cache_root(args.cache_dir)
    except NotACache:  # the run itself says why, in its one line
        return None
    state = root_state(root)
    if state == "new":  # what the run would do first: mark it, so the record does not make it "foreign"
        write_marker(root)
    models = expand_models(getattr(args, "models", None))
    record = ShardRecord(root, sweep_id(models, [b.name for b in benches], shard[1]), *shard)
    for other in record.enter(read_only=state not in ("new", "marked") or not writable(root)):
        print(f"evaldag: warning: shard {shard[0]}/{shard[1]} of this sweep is also being run by {other} (its record "
              f"in {record.dir}): both compute the same checkpoints and one share may be left undone; check the "
              "job array's indices (the cache stays correct)", file=sys.stderr)
    return record


# --- issue 32: a sweep in step order, its sweep.json and --select ---------------------------

def add_arguments(parser) -> None:
    """``--step-of`` and ``--select`` (a sweep's; see docs/training.md)."""
    parser.add_argument("--step-of", action="append", default=[], metavar="NAME=N",
                        help="the training step of a checkpoint without trainer_state.json or a checkpoint-N name "
                             "(NAME: its output folder name or its path); repeatable")
    parser.add_argument("--select", default=None, metavar="RULE",
                        help="pick the best checkpoint of a sweep, e.g. \"max model_utility where forget_quality >= 0.05\" "
                             "or \"pareto\"; printed and recorded in OUT/sweep.json (\"selected\")")


def by_step(models: list[str], args, benches: list) -> list[str]:
    """The sweep's checkpoints in step order (said once when some have no step); the --select
    rule read and its names checked against the benchmarks' metrics before anything runs."""
    rule = getattr(args, "select", None)
    if rule:
        known = sorted({w for b in benches for w in _computed(b, args)})
        parsed = selection.parse(rule)
        if known:  # a benchmark without a menu: the names are checked against its SUMMARY after the run
            selection.check_names(parsed, known)
    note = None if getattr(args, "quiet", False) else (lambda text: print(f"evaldag: note: {text}", file=sys.stderr))
    return [c.model for c in checkpoints.order(models, folder_names(models), getattr(args, "step_of", None), note)]


def add_steps(record: dict, models: list[str], names: list[str], args) -> dict:
    """The sweep record (``sweepdir.sweep_record``) with each checkpoint's ``step`` and
    ``step_from``, and with --select's ``"selected"`` (the choice printed, with why)."""
    steps = {c.name: c for c in checkpoints.order(models, names, getattr(args, "step_of", None))}
    for row in record.get("checkpoints", []):
        cp = steps.get(row.get("name"))
        row.update(step=cp.step if cp else None, step_from=cp.step_from if cp else None)
    rule = getattr(args, "select", None)
    if not rule:
        return record
    rows = [(n, checkpoints.flat(record.get("table", {}), n)) for n in names]
    try:
        chosen = selection.select(rule, rows)
    except selection.RuleError as e:  # the runs and the report are kept; only the choice is missing
        print(f"evaldag: error: {e}", file=sys.stderr)
        record["selected"] = {"rule": rule, "error": str(e)}
        return record
    record["selected"] = chosen.to_json()
    if not getattr(args, "quiet", False):
        print(f"evaldag: selected {', '.join(chosen.chosen) or 'nothing'} by {rule!r}: {chosen.why}")
    return record


def _computed(bench, args) -> tuple[str, ...]:
    """The metrics this run computes for ``bench`` (its --metrics), else its whole menu."""
    try:
        return tuple(bench.metrics_from_args(args)) or tuple(bench.metric_menu().all)
    except (ValueError, AttributeError):
        return tuple(bench.metric_menu().all)
