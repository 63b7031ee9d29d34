"""The report page of finished runs with each benchmark's own sections: where the registry
meets ``render/``.

``render/report_html.py`` draws what it is handed and knows no benchmark; this module
finds the benchmarks the run folders ran (run.json's ``benchmarks``, else their
``<GROUP>_EVAL.json`` files) and hands them over as the page's plugins, so the plugin base
class (``benchmark.py``) imports nothing of drawing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

from .benchmark import Benchmark
from .registry import BENCHMARKS, BenchmarkRegistry
from .render.clusters import Split, split_vocabulary
from .render.report_html import RunFolder
from .render.report_html import build_report_html as _build_page
from .render.report_html import write_report_html as _write_page
from .render.report_html import write_report_html as _write_page


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
    """The generic data splits plus the benchmarks' own (the bands of a graph drawing)."""
    return split_vocabulary(b.splits for b in benchmarks)


def build_report_html(out_dirs: Sequence[str | os.PathLike], title: str = "evaldag report", *,
                      registry: BenchmarkRegistry = BENCHMARKS) -> str:
    """The report page for finished runs, with the sections of the benchmarks they ran."""
    return _build_page(out_dirs, title, plugins=lambda runs: benchmarks_of(runs, registry))


def write_report_html(out_dirs: Sequence[str | os.PathLike], dest: str | os.PathLike, *,
                      title: str = "evaldag report", registry: BenchmarkRegistry = BENCHMARKS,
                      shown: Sequence[str | os.PathLike] | None = None) -> Path:
    """``report.html`` for finished runs, with the sections of the benchmarks they ran
    (``shown``: the folder names titles use, when the files are read from a stage)."""
    return _write_page(out_dirs, dest, title=title, plugins=lambda runs: benchmarks_of(runs, registry), shown=shown)


__all__ = ["benchmarks_of", "build_report_html", "splits_of", "write_report_html"]
