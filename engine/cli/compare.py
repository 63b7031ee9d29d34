"""``evaldag compare A B [--out FILE]``: each metric of two run folders, side by side, and B - A.

Why: "did the unlearning step move forget quality, and by how much?" is the first
question after a second run. Rows are read from the runs' published files (no cache
needed), matched on (benchmark, metric); a metric only one run has is listed with an
empty side. ``--out`` writes the same table as JSON (``.json``) or CSV (anything else).

When both runs scored the same items, the difference is also tested item by item
(``engine/uncertainty.py``): each metric's items are read from the runs' ``<GROUP>_EVAL.json``
(``value_by_index``) through the benchmark that wrote them (``Benchmark.item_sample``), so no
model runs; the paired bootstrap interval of B - A, a paired permutation p-value (exact on few
items), Holm's adjustment over the metrics tested (Benjamini-Hochberg's in the files), and whether the difference is inside the noise.
With ``--pool``, A and B may each be a folder of several runs of one method (training seeds):
each side's number is the mean over its runs, and B - A gets a cluster bootstrap interval
(A's seeds, B's seeds and the items resampled independently; ``uncertainty.pooled_paired``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..export import ExportError, _read, benchmarks_by_group, csv_text, folder_rows, run_folders
from ..paired_report import retain_logs_of
from ..uncertainty import adjust, paired, pooled_paired

FIELDS = ("benchmark", "metric", "split", "a", "b", "delta")
PAIRED_FIELDS = ("ci_low", "ci_high", "p_value", "p_holm", "p_bh", "verdict", "n_items")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = sub.add_parser("compare", help="per-metric difference between two run folders (B - A), tested item by item")
    c.add_argument("a", metavar="A", help="a run folder (the baseline)")
    c.add_argument("b", metavar="B", help="another run folder")
    c.add_argument("--out", default=None, metavar="FILE", help="also write the table: FILE.json as JSON, otherwise CSV")
    c.add_argument("--bootstrap-resamples", "--bootstrap-cycles", "--bootstrap-iters", dest="bootstrap_resamples", type=int,
                   default=1000, metavar="N", help="paired bootstrap resamples and random permutations (default 1000; 0: no paired test)")
    c.add_argument("--seed", type=int, default=0, help="the seed of the paired bootstrap and permutations (default 0)")
    c.add_argument("--pool", action="store_true",
                   help="A and B may each be a folder of several runs of one method (training seeds): each side's mean, and the "
                        "interval of B - A with seeds and items resampled")
    return c


def _side(path: str, pool: bool) -> list[tuple[list[dict], Path]]:
    runs = run_folders([path])
    if len(runs) != 1 and not pool:
        raise ExportError(f"{path}: holds {len(runs)} runs (a sweep's folder?); name one of them, or pass --pool to pool "
                          "them as runs of one method (training seeds): " + ", ".join(str(d) for _, d in runs[:3]))
    return [(folder_rows(name, folder), folder) for name, folder in runs]


def _pooled_rows(side: list[tuple[list[dict], Path]]) -> list[dict]:
    """One run's rows, or a pool's: each (benchmark, metric) the mean over the runs that hold a number."""
    if len(side) == 1:
        return side[0][0]
    seen: dict[tuple[str, str], dict] = {}
    values: dict[tuple[str, str], list[float]] = {}
    for rows, _ in side:
        for r in rows:
            key = (r["benchmark"], r["metric"])
            seen.setdefault(key, r)
            if _num(r["value"]) is not None:
                values.setdefault(key, []).append(float(r["value"]))
    return [{**r, "value": sum(values[k]) / len(values[k]) if values.get(k) else None} for k, r in seen.items()]


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


def add_paired(rows: list[dict], fa: Path | list[Path], fb: Path | list[Path], n_resamples: int, seed: int) -> list[dict]:
    """Each row whose metric both sides hold item by item gets its paired test (a side of several
    runs, a pool of seeds: the pooled interval); Holm over them all."""
    pa, pb = (list(f) if isinstance(f, list) else [f] for f in (fa, fb))
    benches = benchmarks_by_group(pa[0])
    evals: dict[tuple[str, str], Any] = {}

    def file(folder: Path, group: str) -> Any:
        key = (str(folder), group)
        if key not in evals:
            f = folder / f"{group}_EVAL.json"
            evals[key] = _read(f) if f.is_file() else {}
        return evals[key]

    def samples(folders: list[Path], bench: Any, r: dict) -> list[Any] | None:
        out = [bench.item_sample(r["metric"], e, retain_of(f, r["benchmark"])) if isinstance(e := file(f, r["benchmark"]), dict)
               else None for f in folders]
        return None if any(s is None for s in out) else out

    def retain_of(folder: Path, group: str) -> Any:
        key = (str(folder), group + "/retain")
        if key not in evals:
            evals[key] = retain_logs_of(_read(folder / "run.json") if (folder / "run.json").is_file() else {}, group, folder)
        return evals[key]

    tested = []
    for r in rows:
        bench = benches.get(r["benchmark"].upper())
        if bench is None or r["a"] is None or r["b"] is None:
            continue
        sa, sb = samples(pa, bench, r), samples(pb, bench, r)
        if sa is None or sb is None:
            continue
        try:
            r["paired"] = paired(sa[0], sb[0], n_resamples, seed) if len(sa) == len(sb) == 1 else pooled_paired(sa, sb, n_resamples, seed)
            if sa[0].notes.get("statistic") == "ks":
                r["paired"]["statistic"] = "ks"  # B - A on the KS statistic: forget quality falls as it grows
        except ValueError as e:
            r["paired"] = {"verdict": f"no test ({e})"}
        tested.append(r)
    adjust([r["paired"] for r in tested])
    return rows


def _fmt(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.4g}" if signed else f"{v:.4g}"


def render(rows: list[dict], a: str, b: str) -> str:
    w = max([len(f"{r['benchmark']}/{r['metric']}") for r in rows] + [6])
    head = f"{'metric':<{w}}  {'A':>10}  {'B':>10}  {'B - A':>10}"
    body = [f"{r['benchmark'] + '/' + r['metric']:<{w}}  {_fmt(r['a']):>10}  {_fmt(r['b']):>10}  {_fmt(r['delta'], True):>10}"
            for r in rows]
    lines = [f"A = {a}", f"B = {b}", head, *body]
    tested = [r for r in rows if "paired" in r]
    if tested:
        pr = tested[0]["paired"]
        lines += ["", f"paired, on the items both runs scored ({pr.get('n_resamples')} resamples, seed {pr.get('seed')}, "
                      f"{100 * pr.get('confidence_level', 0.95):.0f}% interval of B - A; p: permutation test, Holm-adjusted over "
                      f"{len(tested)} metrics):",
                  f"{'metric':<{w}}  {'B - A':>10}  {'interval':>21}  {'p':>8}  {'p (Holm)':>8}  {'items':>6}  verdict"]
        for r in tested:
            p = r["paired"]
            ci = p.get("percentile")
            span = f"[{_fmt(ci[0], True)}, {_fmt(ci[1], True)}]" if ci else "-"
            n = sum((p.get("n_items") or {}).values())
            lines.append(f"{r['benchmark'] + '/' + r['metric']:<{w}}  {_fmt(p.get('delta'), True):>10}  {span:>21}  "
                         f"{_fmt(p.get('p_value')):>8}  {_fmt(p.get('p_holm')):>8}  {n:>6}  {p['verdict']}"
                         + ("  (exact)" if p.get("exact") else "") + ("  (on the KS statistic)" if p.get("statistic") == "ks" else "") + ("  (pooled seeds: the interval alone)" if p.get("interval_only") else ""))
    return "\n".join(lines) + "\n"


def _flat(r: dict) -> dict:
    p = r.get("paired") or {}
    ci = p.get("percentile") or [None, None]
    return {**{k: r[k] for k in FIELDS}, "ci_low": ci[0], "ci_high": ci[1], "p_value": p.get("p_value"),
            "p_holm": p.get("p_holm"), "p_bh": p.get("p_bh"), "verdict": p.get("verdict"), "n_items": sum((p.get("n_items") or {}).values()) or None}


def dump(rows: list[dict], path: Path, a: str, b: str) -> None:
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps({"a": a, "b": b, "metrics": rows}, indent=2, allow_nan=False), encoding="utf-8")
        return
    paired_too = any("paired" in r for r in rows)
    path.write_text(csv_text([_flat(r) for r in rows] if paired_too else rows, FIELDS + PAIRED_FIELDS if paired_too else FIELDS),
                    encoding="utf-8")


def cmd(args: argparse.Namespace) -> int:
    try:
        sa, sb = _side(args.a, args.pool), _side(args.b, args.pool)
        rows = table(_pooled_rows(sa), _pooled_rows(sb))
        if args.bootstrap_resamples > 0:
            rows = add_paired(rows, [f for _, f in sa], [f for _, f in sb], args.bootstrap_resamples, args.seed)
        sys.stdout.write(render(rows, args.a, args.b))
        if args.out:
            dump(rows, Path(args.out), args.a, args.b)
    except (ExportError, OSError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    return 0
