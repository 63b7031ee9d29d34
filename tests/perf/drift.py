"""Measure how much stored values move with the batch shape (docs/cache.md, "drift").

    python tests/perf/drift.py [--metrics default] [--out /tmp/evaldag-drift]

Runs TOFU (every metric, the retain model through the graph) on the fixture target
checkpoint (CPU, fp32) three times, each with its own
cache: the default token budget, ``--batch-tokens 256`` and ``--deterministic`` (every
request alone). Prints, for each pair, how many EVAL values differ and the largest
relative difference, the same for SUMMARY, and how many stored nodes differ.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
FIX = HERE / "fixtures"


def leaves(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from leaves(v, f"{path}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from leaves(v, f"{path}/{i}")
    else:
        yield path, x


def numbers(x, kinds=(int, float)) -> dict[str, float]:
    """Every numeric leaf of an EVAL-like tree by its path (booleans are not numbers here)."""
    return {p: float(v) for p, v in leaves(x) if isinstance(v, kinds) and not isinstance(v, bool)}


def compare(a: dict, b: dict) -> tuple[int, int, float, set]:
    """(values, values that differ, largest relative difference, metrics with a difference)."""
    la, lb = dict(leaves(a)), dict(leaves(b))
    n = differ = 0
    worst = 0.0
    metrics = set()
    for k, x in la.items():
        y = lb.get(k)
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            continue
        n += 1
        if x != y and not (math.isnan(x) and math.isnan(y)):
            differ += 1
            metrics.add(k.split("/")[1])
            worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-300))
    return n, differ, worst, metrics


def main() -> int:
    from evaldag.engine import cli

    p = argparse.ArgumentParser()
    p.add_argument("--metrics", default="all")
    p.add_argument("--out", default="/tmp/evaldag-drift")
    a = p.parse_args()
    base = Path(a.out)
    modes = {"default": [], "batch-tokens-256": ["--batch-tokens", "256"], "deterministic": ["--deterministic"]}
    for name, extra in modes.items():
        argv = ["run", "tofu", "--model", str(FIX / "tiny-llama" / "target"), "--data", str(FIX / "tofu_tiny"),
                "--metrics", a.metrics, "--reference-model", str(FIX / "tiny-llama" / "retain"),
                "--retain-model", str(FIX / "tiny-llama" / "retain"), "--device", "cpu", "--dtype", "fp32", "--quiet",
                "--out", str(base / name), "--cache-dir", str(base / f"cache-{name}"), *extra]
        if cli.main(argv) != 0:
            print(f"{name}: evaldag failed", file=sys.stderr)
            return 1
    read = lambda m, f: json.loads((base / m / f).read_text())  # noqa: E731
    print(f"{'pair':40s} {'EVAL values':>12s} {'differ':>7s} {'max rel':>9s} {'metrics':>8s} {'SUMMARY differ':>15s} {'max rel':>9s}")
    for x, y in (("default", "batch-tokens-256"), ("default", "deterministic"), ("batch-tokens-256", "deterministic")):
        ev = read(x, "TOFU_EVAL.json")
        n, d, w, ms = compare(ev, read(y, "TOFU_EVAL.json"))
        sn, sd, sw, _ = compare(read(x, "TOFU_SUMMARY.json"), read(y, "TOFU_SUMMARY.json"))
        print(f"{x + ' vs ' + y:40s} {n:12d} {d:7d} {w:9.2e} {f'{len(ms)}/{len(ev)}':>8s} {f'{sd} of {sn}':>15s} {sw:9.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
