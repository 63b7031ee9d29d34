"""Writing a run's files: ``<BENCH>_EVAL.json``, ``<BENCH>_SUMMARY.json`` and ``run.json``.

The EVAL and SUMMARY files use open-unlearning's shapes and metric names, so either
tool can read the other's files (e.g. as retain logs). A run's files are one set: they
are written into a fresh folder ``out/.evaldag/sets/<id>/`` and published by one rename
of the link ``out/.evaldag/current`` (``sets.py``; the names in ``out`` are links through
it). A reader sees the old set or the new one at every instant; a full disk leaves the
old set as it was (and no temp files); two runs writing one ``out`` at once both
finish, and the set is one run's. ``run.json`` is read by other
tools (the renderers, ``evaldag report``); its keys are stable::

    {"nodes": {name: {"fingerprint", "status", "seconds", "reason"}},
     "executor": {...}, "wall_seconds": float, "provenance": {...},
     "benchmarks": [names],   # the registered benchmarks that ran (their report sections)
     "refresh": "none" | "nodes" | "requests" | "all"}   # what was recomputed regardless of the cache
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..cache.files import CacheWriteError, write_error
from ..redact import redact
from ..results import Result, RunResult
from .sets import Interrupted, NotOurs, new_stage, publish

Extra = Callable[[RunResult, Path], Any]  # writes more files of the set into the folder it is given


def jsonable(x: Any) -> Any:
    """Plain JSON data: Results as their dict, arrays as lists, NaN and infinities as ``null``
    (``NaN`` is not JSON: ``JSON.parse`` and strict readers refuse the whole file; a Result's
    ``reason`` beside its ``agg_value`` says why it is missing)."""
    if isinstance(x, Result):
        return jsonable(x.to_dict())
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return jsonable(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


#: a Result's ``extra`` key whose sentence the SUMMARY shows under ``notes``, beside the numbers
SUMMARY_NOTE = "summary_note"


def summary_with_reasons(summary: dict[str, Any], evals: dict[str, Any]) -> dict[str, Any]:
    """A SUMMARY's missing value (NaN: no number) as ``{"value": null, "reason": ...}`` when its
    Result says why, else ``null``; every number stays a number, open-unlearning's shape."""
    out = {}
    for name, value in summary.items():
        why = getattr(evals.get(name), "reason", None)
        missing = isinstance(value, float) and not math.isfinite(value)
        out[name] = {"value": None, "reason": why} if missing and why else value
    return out


def with_backends(evals: dict[str, Result], served: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Each metric's Result, with ``"served_by": {resource: backend}`` beside its ``agg_value`` when
    a ``--fallback`` ran (RunResult.served_by), as a ``reason`` sits there: the numbers keep
    open-unlearning's shape, and a run without a fallback writes exactly what it always did."""
    return {n: {**r.to_dict(), "served_by": redact(served[n])} if served.get(n) else r for n, r in evals.items()}


def _dump(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(jsonable(obj), indent=4, sort_keys=True, allow_nan=False))


def add_to_summary(folder: Path, group: str, key: str, value: Any) -> Path:
    """One more key in ``<GROUP>_SUMMARY.json`` of a set being written (a benchmark's
    ``write_outputs``, asked for by its user: the intervals beside the numbers), written as the
    engine writes the file; the other keys stay as they were."""
    path = Path(folder) / f"{group.upper()}_SUMMARY.json"
    summary = json.loads(path.read_text())
    _dump(path, {**summary, key: value})
    return path


def add_file(folder: Path, name: str, obj: Any) -> Path:
    """One more JSON file in a set being written (a benchmark's ``write_outputs``), written as the
    engine writes its own."""
    path = Path(folder) / name
    _dump(path, obj)
    return path


def add_to_run_json(folder: Path, key: str, group: str, value: Any) -> Path:
    """``run.json``'s ``key`` (an object by group) gains ``group: value`` in a set being written
    (a benchmark names a file it wrote beside it); the other keys stay as they were."""
    path = Path(folder) / "run.json"
    meta = json.loads(path.read_text())
    _dump(path, {**meta, key: {**(meta.get(key) or {}), group: value}})
    return path


def node_names(result: RunResult) -> dict[str, str]:
    """Vertex key -> the name run.json uses (``group/name`` only when groups would collide)."""
    qualify = len([g for g in result.graph.groups if g is not None]) > 1
    out = {}
    for v in result.graph.order():
        if v.names:
            g, n = v.names[0]
            out[v.key] = f"{g}/{n}" if qualify and g else n
        else:
            out[v.key] = v.label
    return out


def run_json(result: RunResult, benchmarks: Sequence[str] = (), refresh: str | None = None) -> dict:
    names = node_names(result)
    nodes = {names[k]: rec.to_json() for k, rec in result.records.items()}
    for k, rec in result.records.items():
        v = result.graph.vertices[k]
        nodes[names[k]].update(
            metric=v.metric.name,
            kind=v.metric.kind,
            version=v.metric.version,
            parents={a: names[p] for a, p in v.parent_keys.items()},
            names=[f"{g}/{n}" if g else n for g, n in v.names],
            params=v.node.params.model_dump(mode="json"),
            params_not_default=v.node.params.model_dump(mode="json", exclude_defaults=True),
            resources=dict(v.resources),
        )
    out = {
        "nodes": nodes,
        "executor": result.executor,
        "wall_seconds": result.wall_seconds,
        "lock_wait_seconds": result.lock_wait_seconds,
        "provenance": redact(result.provenance),  # also a RunResult whose provenance was built by hand
    }
    if benchmarks:  # the registered benchmarks whose report sections draw this folder
        out["benchmarks"] = list(benchmarks)
    out["refresh"] = refresh or "none"  # what the run recomputed regardless of the cache: nodes, requests, all
    return out


def write(result: RunResult, out_dir: str | os.PathLike, bench: str | None = None,
          benchmarks: Sequence[str] = (), refresh: str | None = None, also: Sequence[Extra] = ()) -> list[Path]:
    """Write the EVAL/SUMMARY pair per benchmark group, run.json (which records benchmarks)
    and what each of ``also`` writes into the folder it is given, as one set.

    Named nodes without a group (a user's own metric added to a benchmark's graph) get
    their own pair, named after the run: ``<BENCH>_`` from ``bench``, or ``RUN_`` when
    ``bench`` is not given or is already a group's name.
    """
    out = Path(out_dir)
    with staged(out) as stage:
        names = [p.name for p in _write_files(result, stage, bench, benchmarks, refresh)]
        for extra in also:
            extra(result, stage)
        names += sorted(p.name for p in stage.iterdir() if p.name not in names)
    result.out = out
    return [out / n for n in names]


def _write_files(result: RunResult, out: Path, bench: str | None, benchmarks: Sequence[str], refresh: str | None) -> list[Path]:
    written = []
    grouped = [g for g in result.graph.groups if g is not None]
    run_name = "RUN" if not bench or bench.upper() in {g.upper() for g in grouped} else bench.upper()
    groups: list[str | None] = grouped + [None] if None in result.graph.groups or not grouped else grouped
    for g in groups:
        name = g.upper() if g else run_name
        evals = {n: v for n, v in result.results(g).items() if isinstance(v, Result)}
        _dump(out / f"{name}_EVAL.json", with_backends(evals, result.served_by(g)))
        summary = summary_with_reasons(result.summary(g), evals)
        served = {n: redact(b) for n, b in result.served_by(g).items() if n in summary}
        if served:  # a --fallback ran: which backend gave each headline number (numbers stay numbers)
            summary["served_by"] = served
        notes = {n: r.extra[SUMMARY_NOTE] for n, r in evals.items() if n in summary and r.extra.get(SUMMARY_NOTE)}
        if notes:  # a metric's own sentence on its number (mia_blind_baseline: which MIA does not beat it)
            summary["notes"] = notes
        _dump(out / f"{name}_SUMMARY.json", summary)
        written += [out / f"{name}_EVAL.json", out / f"{name}_SUMMARY.json"]
    _dump(out / "run.json", run_json(result, benchmarks, refresh))
    written.append(out / "run.json")
    return written


@contextlib.contextmanager
def staged(out_dir: str | os.PathLike) -> Iterator[Path]:
    """A fresh set folder inside ``out_dir``; it becomes ``out_dir``'s current set on exit
    (``sets.publish``: one atomic step).

    Nothing is published if the block raises (SIGINT included). Any OSError (a full disk)
    becomes one :class:`CacheWriteError` line naming the folder; an unpublished stage is
    always removed.
    """
    out = Path(out_dir)
    stage, published = None, False
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage = new_stage(out)
        yield stage
        try:
            publish(stage, out)
            published = True
        except Interrupted as e:
            published = e.published
            raise
    except (CacheWriteError, NotOurs, Interrupted):
        raise
    except OSError as e:
        raise write_error(out, e) from e
    finally:
        if stage is not None and not published:
            shutil.rmtree(stage, ignore_errors=True)


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file written by us or by open-unlearning (NaN literals allowed)."""
    return json.loads(Path(path).read_text())
