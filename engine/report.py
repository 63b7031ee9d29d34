"""``write_report(result, out_dir)``: what the Python user's "write the report" means.

Why: the public name promised a report but wrote only the JSON files (``outputs.write``);
a notebook user looked for report.html and found none. ``write_report`` now writes the
run's files (``<GROUP>_EVAL.json``, ``<GROUP>_SUMMARY.json``, ``run.json``, one set, as
``evaldag run`` does) and then ``report.html`` beside them, the page ``evaldag report``
builds; ``write_outputs`` (``outputs.write``) is the files alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .benchmark import write_report_html
from .outputs import write as write_outputs
from .results import RunResult


def write_report(result: RunResult, out_dir: str | os.PathLike, bench: str | None = None, **kw: Any) -> list[Path]:
    """The run's files (``write_outputs``'s arguments), then ``out_dir/report.html``; returns every path written."""
    paths = write_outputs(result, out_dir, bench=bench, **kw)
    page = write_report_html([out_dir], Path(out_dir) / "report.html")
    return [*paths, Path(page)]


__all__ = ["write_outputs", "write_report"]
