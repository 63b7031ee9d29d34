"""A run's headline numbers as one long table: run, model, benchmark, metric, split, value.

Researchers take results to pandas, a spreadsheet or a plotting script; the long form
(one row per metric per run) is what ``pd.concat`` over runs and ``pivot_table`` expect.
Rows come from a finished folder (``<GROUP>_SUMMARY.json`` + ``run.json``: the files a
run publishes, so an export never needs the cache) or from a :class:`RunResult` in memory
(``RunResult.to_pandas()``). CSV and JSON lines are written with the standard library;
pandas is needed only for ``to_pandas()`` and parquet (the ``evaldag[pandas]`` extra).

* ``benchmark``: the group of the SUMMARY file (``TOFU_SUMMARY.json`` -> ``TOFU``);
* ``split``: the data split the metric's name points at (``forget_Q_A_Prob`` -> forget),
  from the words the run's benchmarks declare (``Benchmark.splits``: forget / holdout / retain
  from the unlearning benchmarks, TOFU's real authors);
  empty for a metric that mixes splits (model utility, an MIA);
* ``model``: the evaluated model's path (or hub id) as run.json's provenance records it;
* ``step``: the training step of a checkpoint (its sweep's ``sweep.json``, its
  ``trainer_state.json``, a ``checkpoint-N`` name: ``checkpoints.py``), empty when unknown.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from .checkpoints import run_step, step_of
from .registry import BENCHMARKS
from .sweepdir import run_folders as sweep_runs
# the split vocabulary lives with the drawing's bands (render/ is a leaf: importing it pulls nothing else)
from .render.clusters import Split, guess_split, split_vocabulary

COLUMNS = ("run", "model", "benchmark", "metric", "split", "value", "step")  # step: the training step, if known
PANDAS_EXTRA = "pip install 'evaldag[pandas]'"


class ExportError(ValueError):
    """A folder that holds no run, a file that is not a run's: one line for the CLI."""


def run_folders(paths: Sequence[str | Path]) -> list[tuple[str, Path]]:
    """(run name, folder) for each run: a folder with run.json is one run; a sweep's OUT
    is each of its checkpoints, in sweep order (``sweepdir.run_folders``)."""
    try:
        out = sweep_runs(paths)
    except FileNotFoundError as e:
        raise ExportError(str(e)) from None
    for _, folder in out:
        if not (folder / "run.json").is_file():
            raise ExportError(f"{folder}: no run.json (export reads evaldag's run folders)")
    return out


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ExportError(f"{path}: cannot be read as JSON ({type(e).__name__}: {e})") from None


def model_of(provenance: Any) -> str:
    """The evaluated model's path (or hub id) from run.json's provenance; its fingerprint when no path is recorded."""
    if not isinstance(provenance, dict):
        return ""
    res = provenance.get("resources")
    model = res.get("model") if isinstance(res, dict) else None
    if isinstance(model, dict) and isinstance(model.get("path"), str):
        return model["path"]
    fp = provenance.get("model_fingerprint")
    return fp if isinstance(fp, str) else ""


def splits_for(benchmarks: Iterable[str]) -> tuple[Split, ...]:
    """The splits the named benchmarks declare (``Benchmark.splits``; a benchmark that cannot be
    loaded adds none); the registry imports only the benchmarks named."""
    own = []
    for name in benchmarks:
        if name not in BENCHMARKS:
            continue
        try:
            own.append(BENCHMARKS.get(name).splits)
        except Exception:  # noqa: BLE001 - an uninstalled plugin: its extra splits are not guessed
            continue
    return split_vocabulary(own)


def rows(run: str, model: str, summaries: dict[str, dict], splits: Sequence[Split] = (),
         step: int | None = None) -> list[dict]:
    """Long-form rows for one run: ``summaries`` maps a benchmark group to {metric: value}."""
    out = []
    for bench, summary in summaries.items():
        for metric, value in summary.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) and value is not None:
                continue  # a SUMMARY holds numbers; anything else is not a headline value
            out.append({"run": run, "model": model, "benchmark": bench, "metric": metric,
                        "split": guess_split(metric, splits) or "", "value": value, "step": step})
    return out


def benchmarks_by_group(folder: Path) -> dict[str, Any]:
    """Group -> the benchmark plugin that wrote it (those run.json names and that load)."""
    meta = _read(folder / "run.json")
    names = meta.get("benchmarks") if isinstance(meta, dict) and isinstance(meta.get("benchmarks"), list) else []
    out = {}
    for n in names:
        if isinstance(n, str) and n in BENCHMARKS:
            try:
                bench = BENCHMARKS.get(n)
            except Exception:  # noqa: BLE001 - an uninstalled plugin: its metrics get no item-level statistics
                continue
            out[bench.group.upper()] = bench
    return out


def folder_rows(run: str, folder: Path) -> list[dict]:
    meta = _read(folder / "run.json")
    if not isinstance(meta, dict):
        raise ExportError(f"{folder / 'run.json'}: not a run.json (an object is expected)")
    benchmarks = [b for b in meta.get("benchmarks", []) if isinstance(b, str)] if isinstance(meta.get("benchmarks"), list) else []
    summaries = {}
    for f in sorted(folder.glob("*_SUMMARY.json")):
        data = _read(f)
        if not isinstance(data, dict):
            raise ExportError(f"{f}: not a SUMMARY file (an object of metric -> value is expected)")
        summaries[f.name[: -len("_SUMMARY.json")]] = data
    model = model_of(meta.get("provenance"))
    return rows(run, model, summaries, splits_for(benchmarks), run_step(run, folder, model))


def collect(paths: Sequence[str | Path]) -> list[dict]:
    """Every row of every run under ``paths`` (run folders or a sweep's OUT)."""
    return [r for name, folder in run_folders(paths) for r in folder_rows(name, folder)]


def result_rows(result: Any, run: str = "") -> list[dict]:
    """Rows of a :class:`RunResult` in memory, named like the files its run would write; the
    splits of the benchmarks whose group it ran (``TOFU`` -> tofu's) are guessed too. Once its
    files are written, ``run`` and ``step`` default to what ``evaldag export`` of that folder says."""
    groups = [g for g in result.graph.groups if g is not None]
    summaries = {g.upper(): result.summary(g) for g in groups}
    # as the files are written (outputs/files.py): nodes named without a group, or a graph with no
    # group at all (unnamed roots, by their label), make the RUN pair
    ungrouped = result.summary(None) if None in result.graph.groups or not groups else {}
    if ungrouped:
        summaries["RUN"] = ungrouped
    model, out = model_of(result.provenance), getattr(result, "out", None)
    run = run or (Path(out).resolve().name if out is not None else "")
    step = run_step(run, Path(out), model) if out is not None else step_of(run, model, {})[0]
    return rows(run, model, summaries, splits_for(g.lower() for g in groups), step)


def _cell(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


#: what a spreadsheet reads as the start of a formula (or, for a tab or carriage return, lets one through)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(v: Any) -> Any:
    """A CSV cell safe to open in a spreadsheet: text starting with ``= + - @``, a tab or a
    carriage return gets a leading ``'`` (shown as text, never run as a formula: a run folder
    named ``=HYPERLINK(...)`` would otherwise be a live link); numbers and other text are kept.
    JSON lines and parquet keep the raw text: they are read by programs, not spreadsheets."""
    return "'" + v if isinstance(v, str) and v.startswith(FORMULA_START) else v


def _csv_field(v: Any) -> str:
    text = "" if _cell(v) is None else str(csv_cell(v))
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\r\n') else text


def csv_text(table: Iterable[dict], fields: Sequence[str]) -> str:
    """``table`` as CSV (RFC 4180 quoting, ``\\n`` line ends): a cell holding a comma, a quote or
    a line break (a carriage return too, which the ``csv`` module leaves bare when lines end in
    ``\\n``) is quoted; an empty or non-finite value is an empty cell; formulas are escaped."""
    return "".join(",".join(_csv_field(r[k]) for k in fields) + "\n" for r in [dict(zip(fields, fields)), *table])


def to_csv(table: list[dict]) -> str:
    return csv_text(table, COLUMNS)


def to_jsonl(table: list[dict]) -> str:
    """One JSON object per line; a NaN is ``null`` (strict JSON readers refuse a bare NaN)."""
    return "".join(json.dumps({k: _cell(r[k]) for k in COLUMNS}, allow_nan=False) + "\n" for r in table)


def need_pandas(what: str) -> Any:
    try:
        import pandas
    except ImportError:
        raise ExportError(f"{what} needs pandas: {PANDAS_EXTRA}") from None
    return pandas


def to_frame(table: list[dict]) -> Any:
    pd = need_pandas("a DataFrame")
    return pd.DataFrame(table, columns=list(COLUMNS))


def write_parquet(table: list[dict], path: str | Path) -> None:
    frame = need_pandas("--parquet").DataFrame(table, columns=list(COLUMNS))
    try:
        import pyarrow  # noqa: F401 - pandas' parquet engine
    except ImportError:
        raise ExportError(f"--parquet needs pyarrow: {PANDAS_EXTRA}") from None
    frame.to_parquet(path, index=False)
