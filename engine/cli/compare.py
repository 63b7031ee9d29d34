"""``evaldag compare A B [--out FILE]``: each metric of two run folders, side by side, and B - A.

Why: "did the unlearning step move forget quality, and by how much?" is the first
question after a second run. Rows are read from the runs' published files (no cache
needed), matched on (benchmark, metric); a metric only one run has is listed with an
empty side. ``--out`` writes the same table as JSON (``.json``) or CSV (anything else).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..export import ExportError, csv_text, folder_rows, run_folders

FIELDS = ("benchmark", "metric", "split", "a", "b", "delta")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = sub.add_parser("compare", help="per-metric difference between two run folders (B - A)")
    c.add_argument("a", metavar="A", help="a run folder (the baseline)")
    c.add_argument("b", metavar="B", help="another run folder")
    c.add_argument("--out", default=None, metavar="FILE", help="also write the table: FILE.json as JSON, otherwise CSV")
    return c


def _one(path: str) -> list[dict]:
    runs = run_folders([path])
    if len(runs) != 1:
        raise ExportError(f"{path}: holds {len(runs)} runs (a sweep's folder?); name one of them: "
                          + ", ".join(str(d) for _, d in runs[:3]))
    name, folder = runs[0]
    return folder_rows(name, folder)


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def table(a: list[dict], b: list[dict]) -> list[dict]:
    """One row per (benchmark, metric) of either run, in A's order then B's new ones."""
    av = {(r["benchmark"], r["metric"]): r for r in a}
    bv = {(r["benchmark"], r["metric"]): r for r in b}
    out = []
    for key in [*av, *(k for k in bv if k not in av)]:
        ra, rb = av.get(key), bv.get(key)
        x, y = _num(ra["value"]) if ra else None, _num(rb["value"]) if rb else None
        out.append({"benchmark": key[0], "metric": key[1], "split": (ra or rb)["split"],
                    "a": x, "b": y, "delta": y - x if x is not None and y is not None else None})
    return out


def _fmt(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.4g}" if signed else f"{v:.4g}"


def render(rows: list[dict], a: str, b: str) -> str:
    w = max([len(f"{r['benchmark']}/{r['metric']}") for r in rows] + [6])
    head = f"{'metric':<{w}}  {'A':>10}  {'B':>10}  {'B - A':>10}"
    body = [f"{r['benchmark'] + '/' + r['metric']:<{w}}  {_fmt(r['a']):>10}  {_fmt(r['b']):>10}  {_fmt(r['delta'], True):>10}"
            for r in rows]
    return "\n".join([f"A = {a}", f"B = {b}", head, *body]) + "\n"


def dump(rows: list[dict], path: Path, a: str, b: str) -> None:
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps({"a": a, "b": b, "metrics": rows}, indent=2, allow_nan=False), encoding="utf-8")
        return
    path.write_text(csv_text(rows, FIELDS), encoding="utf-8")


def cmd(args: argparse.Namespace) -> int:
    try:
        rows = table(_one(args.a), _one(args.b))
        sys.stdout.write(render(rows, args.a, args.b))
        if args.out:
            dump(rows, Path(args.out), args.a, args.b)
    except (ExportError, OSError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    return 0
