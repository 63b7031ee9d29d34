"""The report page of finished runs with each benchmark's own sections: where the registry
meets ``render/``.

``render/report_html.py`` draws what it is handed and knows no benchmark; this module
finds the benchmarks the run folders ran (run.json's ``benchmarks``, else their
``<GROUP>_EVAL.json`` files) and hands them over as the page's plugins, so the plugin base
class (``benchmark.py``) imports nothing of drawing.

``write_report(result, out_dir)`` is what the Python user's "write the report" means: the
public name promised a report but wrote only the JSON files; it now writes the run's files
(one set, as ``evaldag run`` does) and then ``report.html`` beside them, the page
``evaldag report`` builds; ``write_outputs`` (``outputs.write``) is the files alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from .benchmark import Benchmark
from .registry import BENCHMARKS, BenchmarkRegistry
from .render.clusters import Split, split_vocabulary
from .cache import atomic_write
from .outfolder import is_our_link, is_report, set_folder
from .outputs import write as write_outputs
from .redact import redact_text
from .render.report_html import RunFolder, load_run_folder
from .render.report_html import build_report_html as _build_page
from .results import RunResult
from .paired_report import PairedRuns, check_against  # each run against the previous or the first, item by item
from .training_report import TrainingCurves  # metric against step, the trade-off figure
from .robustness_views import RobustnessSection  # ROBUSTNESS.json beside a run


def benchmarks_of(runs: Iterable[RunFolder], registry: BenchmarkRegistry = BENCHMARKS) -> list[Benchmark]:
    """The benchmarks whose results the run folders hold: run.json's ``benchmarks``, else the
    ``<GROUP>_EVAL.json`` files (folders written by open-unlearning or an older evaldag)."""
    found: dict[str, Benchmark] = {}
    for r in runs:
        names = (r.run or {}).get("benchmarks")
        if isinstance(names, list):
            for n in names:
                if isinstance(n, str) and n in registry:
                    found.setdefault(n, registry.get(n))
            continue
        for group in list(r.evals) + list(r.summaries):
            bench = registry.by_group(group)
            if bench is not None:
                found.setdefault(bench.name, bench)
    return list(found.values())


def splits_of(benchmarks: Iterable[Benchmark]) -> tuple[Split, ...]:
    """The data splits the benchmarks declare, as one vocabulary (the bands of a graph drawing)."""
    return split_vocabulary(b.splits for b in benchmarks)


def runs_of(out_dirs: Sequence[str | os.PathLike], shown: Sequence[str | os.PathLike] | None = None) -> list[RunFolder]:
    """Each folder's files, all from its published set (never a mix of two runs); ``shown``
    names it in titles (the --out folder while its set is still being staged)."""
    runs = []
    for path, name in zip(out_dirs, shown or [None] * len(out_dirs)):
        given = Path(path)
        if not given.is_dir():
            raise FileNotFoundError(f"{given}: not a folder (give the --out folder of a run)")
        runs.append(load_run_folder(set_folder(given), shown=name if name is not None else given))
    return runs


def _plugins(runs: list[RunFolder], registry: BenchmarkRegistry, against: str = "previous") -> list[Any]:
    """The runs' benchmarks, the training curves with the trade-offs those benchmarks declare, and
    the paired tests (each run ``against`` the previous one or the first)."""
    benches = benchmarks_of(runs, registry)
    return [*benches, TrainingCurves([b.tradeoff for b in benches if getattr(b, "tradeoff", None)]), PairedRuns(benches, against),
            RobustnessSection()]


def build_report_html(out_dirs: Sequence[str | os.PathLike], title: str = "evaldag report", *,
                      registry: BenchmarkRegistry = BENCHMARKS, shown: Sequence[str | os.PathLike] | None = None,
                      against: str = "previous") -> str:
    """The report page for finished runs, with the sections of the benchmarks they ran
    (folder names redacted: a token in a path is not printed); ``against``: the paired tests
    take each run against the ``"previous"`` one or the ``"first"`` (the baseline)."""
    check_against(against)
    return _build_page(runs_of(list(out_dirs), shown), title, plugins=lambda runs: _plugins(runs, registry, against),
                       redact=redact_text)


def write_report_html(out_dirs: Sequence[str | os.PathLike], dest: str | os.PathLike, *,
                      title: str = "evaldag report", registry: BenchmarkRegistry = BENCHMARKS,
                      shown: Sequence[str | os.PathLike] | None = None, against: str = "previous") -> Path:
    """Write ``report.html`` for finished runs (atomically) and return its path.

    ``dest`` may replace only a report evaldag wrote (never an EVAL file, never a user's
    page); ``OUT/report.html`` of a published set is rewritten inside that set, so the
    link stays and the set stays one run's. ``shown``: the folder names titles use, when
    the files are read from a stage; ``against``: as :func:`build_report_html` takes it.
    """
    dest = Path(dest)
    target = dest
    if dest.name == "report.html" and is_our_link(dest):
        target = set_folder(dest.parent) / dest.name
    elif os.path.lexists(dest) and not (is_report(dest) and not is_our_link(dest)):
        raise ValueError(f"{dest}: not a report evaldag wrote; refusing to replace it (choose another --out)")
    html_text = build_report_html(list(out_dirs), title, registry=registry, shown=shown, against=against)
    atomic_write(target, html_text.encode("utf-8"))  # a unique temp name: concurrent writers never collide
    return dest


def write_report(result: RunResult, out_dir: str | os.PathLike, bench: str | None = None, **kw: Any) -> list[Path]:
    """The run's files (``write_outputs``'s arguments), then ``out_dir/report.html``; returns every path written."""
    paths = write_outputs(result, out_dir, bench=bench, **kw)
    page = write_report_html([out_dir], Path(out_dir) / "report.html")
    return [*paths, Path(page)]


__all__ = ["benchmarks_of", "build_report_html", "runs_of", "splits_of", "write_outputs", "write_report", "write_report_html"]
