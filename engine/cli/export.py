"""``evaldag export DIR [DIR ...] --csv|--jsonl|--parquet [--out FILE]``: the runs' numbers as one long table.

Standard output without ``--out`` (parquet is binary: it needs ``--out``). A DIR is a run
folder or a sweep's OUT (one folder per checkpoint). See :mod:`evaldag.engine.export`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..export import COLUMNS, ExportError, collect, to_csv, to_jsonl, write_parquet
from ..export_wandb import to_wandb


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    e = sub.add_parser("export", help="the runs' metrics as one table (CSV, JSON lines, parquet)",
                       description="One row per metric per run: run, model, benchmark, metric, split, value.")
    e.add_argument("dirs", nargs="+", metavar="DIR", help="run folders (--out of `evaldag run`), or a sweep's --out")
    fmt = e.add_mutually_exclusive_group()
    fmt.add_argument("--csv", dest="format", action="store_const", const="csv", help="comma-separated (the default)")
    fmt.add_argument("--jsonl", dest="format", action="store_const", const="jsonl", help="one JSON object per line")
    fmt.add_argument("--parquet", dest="format", action="store_const", const="parquet",
                     help="parquet (needs pandas and pyarrow: pip install 'evaldag[pandas]'; needs --out)")
    e.add_argument("--out", default=None, metavar="FILE", help="write here (default: standard output)")
    e.add_argument("--wandb", default=None, metavar="PROJECT", help="log the runs to this Weights & Biases project, each "
                   "at its training step (pip install 'evaldag[wandb]'; WANDB_MODE=offline logs locally)")
    return e


def cmd(args: argparse.Namespace) -> int:
    fmt = args.format or "csv"
    try:
        if fmt == "parquet" and not args.out and not args.wandb:
            raise ExportError("--parquet writes a binary file: give --out FILE")
        table = collect(args.dirs)
        if args.wandb:  # W&B instead of a file
            where, steps = to_wandb(table, args.wandb, columns=COLUMNS)
            print(f"evaldag: {len(table)} rows -> W&B project {args.wandb}, logged at steps "
                  f"{', '.join(map(str, steps)) or '-'} ({where})", file=sys.stderr)
            return 0
        if fmt == "parquet":
            write_parquet(table, args.out)
        else:
            text = to_csv(table) if fmt == "csv" else to_jsonl(table)
            if args.out:
                Path(args.out).write_text(text, encoding="utf-8")
            else:
                sys.stdout.write(text)
    except (ExportError, OSError, ValueError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    if args.out:
        print(f"evaldag: {len(table)} rows -> {args.out}", file=sys.stderr)
    return 0
