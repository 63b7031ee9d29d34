"""``evaldag demo``: three bundled checkpoints on the TOFU graph, offline, through one cache.

The target (trained on everything), the unlearned one (the target after gradient
ascent on the forget authors) and the retain model (never saw them) are evaluated on
open-unlearning's default TOFU metrics plus the MIA attacks, with the retain model as
the reference for forget quality and privleak (through the same graph, so its nodes
are computed once and found by fingerprint afterwards) and for the Reference attack.
A second run finds every node in the cache and loads no weights.

The demo is a command that runs the TOFU benchmark, not a part of it: it asks the
benchmark registry for ``tofu`` (as ``evaldag run tofu`` does) and builds its graph from
a ``TofuConfig`` through the plugin's own ``build``, so it imports no module of another
plugin (``tests/engine/test_architecture.py`` checks that leaves never import each other).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ...engine import runlog
from ...engine.redact import redact_argv
from ...engine.registry import BENCHMARKS
from ...engine.report import write_report_html
from ...engine.cache import Cache
from ...engine.outputs import fmt
from ...engine.outputs import write as write_files
from ...engine.results import Result
from ...engine.run import run
from . import DATA, MODEL_NAMES, model_path

HELP = "evaluate the three bundled checkpoints on TOFU, offline"
METRICS = "default,mia"  # open-unlearning's default TOFU metrics, then the MIA attacks
TABLE = ("forget_quality", "forget_truth_ratio", "forget_Q_A_Prob", "forget_Q_A_ROUGE", "model_utility", "privleak",
         "extraction_strength", "mia_loss", "mia_min_k", "mia_min_k_plus_plus", "mia_zlib", "mia_gradnorm", "mia_reference")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="evaldag-demo", help="output folder (default: ./evaldag-demo)")
    p.add_argument("--cache-dir", default=None, help="cache folder (default: $EVALDAG_CACHE_DIR or the user cache dir)")
    p.add_argument("--init-cache", action="store_true", help="make --cache-dir a cache even though it is a non-empty "
                   "folder without evaldag's marker (refused otherwise)")
    p.add_argument("--progress", action="store_true", help="show a progress bar over model tokens")
    p.add_argument("--no-report", action="store_true", help="skip report.html")


def graph(name: str) -> tuple[list, dict]:
    """TOFU's nodes and resources for one bundled checkpoint: the retain checkpoint is the
    retain side (through the same graph) and the Reference attack's reference."""
    tofu = BENCHMARKS.get("tofu")
    retain = str(model_path("retain"))
    cfg = tofu.Config(model=str(model_path(name)), retain_model=retain, reference_model=retain, dtype="fp32",
                      device="cpu", data=str(DATA), forget_split="forget10", metrics=tofu.metric_menu().parse(METRICS))
    return tofu.build(cfg)


def main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    out = Path(args.out)
    try:  # an empty path, or a non-empty folder that is not a cache: one line, before any model loads
        cache = Cache(args.cache_dir)
        cache.claim(init=args.init_cache)
    except ValueError as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    results, ok = {}, True
    command = redact_argv(["evaldag", "demo", "--out", str(out), *(["--cache-dir", str(args.cache_dir)] if args.cache_dir else [])])
    for name in MODEL_NAMES:
        res = run(*graph(name), cache=cache, progress=args.progress, provenance={"command": command})
        write_files(res, out / name, bench="TOFU", benchmarks=["tofu"])
        runlog.record(cache, res, out / name, ["tofu"])  # `evaldag cache runs` lists the demo's runs too
        results[name] = res
        ok = ok and res.ok
        ex = res.executor
        print(
            f"{name:10s} {res.count('computed'):3d} nodes computed, {res.count('cached'):3d} cached;"
            f" {ex['sequences_forwarded']:4d} sequences forwarded ({ex['generations']} generations),"
            f" {ex['cached']} requests from cache; weights loaded: {'yes' if ex['model_loaded'] else 'no'}; {res.wall_seconds:5.1f} s"
        )
    print()
    print(_table(results))
    if not args.no_report:
        write_report_html([out / n for n in MODEL_NAMES], out / "report.html")
        print(f"\nreport: {out / 'report.html'}")
    print(f"results: {out}/<model>/TOFU_EVAL.json, TOFU_SUMMARY.json, run.json  ({time.perf_counter() - t0:.1f} s in all)")
    for name, res in results.items():
        for rec in res.failures():
            print(f"FAILED {name}/{rec.name}:\n{rec.error}")
    return 0 if ok else 1


def _table(results: dict) -> str:
    names = list(results)
    lines = [f"{'metric':22s}" + "".join(f"{n:>14s}" for n in names)]
    lines.append("-" * len(lines[0]))
    for metric in TABLE:
        row = f"{metric:22s}"
        for n in names:
            try:
                val = results[n][f"TOFU/{metric}"]
            except KeyError:
                val = None
            row += f"{fmt(val.agg_value if isinstance(val, Result) else val):>14s}"
        lines.append(row)
    lines.append("")
    lines.append("forget_quality: KS p-value vs the retain model (higher = closer to never having seen the forget set)")
    lines.append("forget_Q_A_Prob: probability of the forget answers (lower after unlearning)")
    lines.append("privleak: % difference in Min-K% 1-AUC from the retain model (near 0 = no leak); mia_*: AUC forget vs holdout")
    return "\n".join(lines)
