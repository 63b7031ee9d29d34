"""``evaldag report OUT_DIR [...]``: one self-contained report.html for finished runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..render.generations import SHOWN, text_lines
from ..render.view import read_evals
from ..report import write_report_html
from ..checkpoints import order_runs
from ..sweepdir import run_folders


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    r = sub.add_parser(
        "report", help="write one self-contained report.html for one or more finished runs",
        description="Metrics side by side, each benchmark's own plots and tables, the run graph and run "
                    "statistics, in one HTML file that needs no network.")
    r.add_argument("out_dirs", nargs="+", metavar="OUT_DIR", help="--out folders of finished runs (one column each), or a sweep's --out (a column per checkpoint)")
    r.add_argument("--out", "-o", default=None, help="the HTML file (default: OUT_DIR/report.html for one folder, else ./report.html)")
    r.add_argument("--title", default="evaldag report")
    r.add_argument("--generations", type=int, nargs="?", const=SHOWN, default=None, metavar="N",
                   help=f"print the first N generations of each generating metric beside the gold answers "
                        f"(default {SHOWN}) instead of writing the report")
    r.add_argument("--against", choices=("previous", "first"), default="previous",
                   help="the paired tests between runs: each run against the previous one (default) or against the "
                        "first, the baseline (Holm over every pair and metric either way)")
    return r


def print_generations(folders: list[Path], shown: int) -> None:
    """``--generations``: each run's first generations in the terminal, from its EVAL files."""
    for folder in folders:
        lines = list(text_lines(read_evals(folder), str(folder), shown))
        print("\n".join(lines) if lines else f"{folder}: no generations (no metric of this run generates)")


def cmd(args: argparse.Namespace) -> int:
    dest = Path(args.out) if args.out else (Path(args.out_dirs[0]) / "report.html" if len(args.out_dirs) == 1 else Path("report.html"))
    try:
        runs = order_runs(run_folders(args.out_dirs), lambda t: print(f"evaldag: note: {t}", file=sys.stderr))  # by step
        folders = [folder for _, folder in runs]  # a sweep's OUT: its checkpoints, in order
        if args.generations is not None:
            print_generations(folders, args.generations)
            return 0
        path = write_report_html(folders, dest, title=args.title, against=args.against)
    except (OSError, ValueError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0
