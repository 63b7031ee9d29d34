"""Benchmark: one rank against several on the same work (torch.distributed, torchrun).

Run on purpose (pytest does not collect ``bench_*.py``)::

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python tests/perf/bench_distributed.py
    python tests/perf/bench_distributed.py --model /path/to/7b --data /path/to/tofu --ranks 1,2,8

Each configuration runs ``torchrun --nproc-per-node N --no-python evaldag run tofu ...``
on a cold cache (``--repeat`` times, the median is printed) and reads run.json:

* rows per rank (``executor.by_rank``), wall time of the command and of the run,
  the executor's time and the gather overhead (rank 0's time in result exchanges,
  waiting for the slowest rank included);
* tokens/s per rank and the scaling efficiency ``tokens/s(N) / (N * tokens/s(1))`` over
  the executor's time: with CUDA devices (NCCL, one device per rank) per device; without
  CUDA the ranks are CPU processes over gloo, and the script says these are no GPU figures.

The default work is the full default TOFU graph on the tiny test checkpoints, which
says how the machinery behaves, not how a model that fills a device scales: for that,
pass ``--model`` and ``--data``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIX = Path(__file__).resolve().parents[1] / "fixtures"
BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(n: int, args: argparse.Namespace, tmp: Path) -> dict:
    out, cache = tmp / f"out-{n}", tmp / f"cache-{n}"
    cmd = [str(BIN / "torchrun"), "--nproc-per-node", str(n), "--master-addr", "127.0.0.1",
           "--master-port", str(_port()), "--no-python", str(BIN / "evaldag"), "run", "tofu",
           "--model", args.model, "--data", args.data, "--quiet", "--out", str(out), "--cache-dir", str(cache),
           *(["--metrics", args.metrics] if args.metrics else [])]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1"}
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{n} ranks failed:\n{proc.stderr[-3000:]}")
    report = json.loads((out / "run.json").read_text())
    ex = report["executor"]
    ranks = ex.get("by_rank") or {"0": {k: ex[k] for k in ("sequences_forwarded", "tokens_real", "seconds")}}
    return {"wall": wall, "run_wall": report["wall_seconds"], "executor_s": ex["seconds"],
            "gather_s": ex.get("gather_seconds", 0.0), "tokens": ex["tokens_real"],
            "rows": [ranks[r]["sequences_forwarded"] for r in sorted(ranks, key=int)],
            "rank_tokens": [ranks[r]["tokens_real"] for r in sorted(ranks, key=int)],
            "rank_seconds": [ranks[r]["seconds"] for r in sorted(ranks, key=int)],
            "eval": (out / "TOFU_EVAL.json").read_bytes()}


def median_run(n: int, args: argparse.Namespace) -> dict:
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="evaldag-bench-dist-") as tmp:
            runs.append(run_once(n, args, Path(tmp)))
    best = sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]
    for key in ("wall", "run_wall", "executor_s", "gather_s"):
        best[key] = statistics.median(r[key] for r in runs)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(FIX / "tiny-llama" / "target"))
    p.add_argument("--data", default=str(FIX / "tofu_tiny"))
    p.add_argument("--metrics", default=None, help="TOFU metrics (default: the default set)")
    p.add_argument("--ranks", default=None, help="comma-separated rank counts (default: 1,2; with CUDA: 1,N devices)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()

    import torch  # only to count devices

    gpus = torch.cuda.device_count()
    default = sorted({1, gpus}) if gpus else [1, 2]  # one rank per GPU; on CPU, two processes
    counts = [int(x) for x in args.ranks.split(",")] if args.ranks else default
    backend = "nccl (one GPU per rank)" if gpus else "gloo (CPU processes)"
    print(f"evaldag distributed benchmark: {backend}, {os.cpu_count()} CPU cores, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '1')}, model {args.model}, median of {args.repeat}\n")
    results = {n: median_run(n, args) for n in counts}
    base = results[counts[0]]
    print("| ranks | rows per rank | wall (command) s | wall (run) s | executor s | gather s | gather share | same EVAL |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, r in results.items():
        share = r["gather_s"] / r["executor_s"] if r["executor_s"] else 0.0
        print(f"| {n} | {' / '.join(map(str, r['rows']))} | {r['wall']:.2f} | {r['run_wall']:.2f} | "
              f"{r['executor_s']:.2f} | {r['gather_s']:.3f} | {share:.1%} | {r['eval'] == base['eval']} |")
    unit = "device" if gpus else "CPU rank"
    if not gpus:
        print("\nNo CUDA device: the figures below are CPU processes sharing this machine's cores, not GPUs.")
    print(f"\n| ranks | tokens/s per {unit} | total tokens/s | scaling efficiency |")
    print("| --- | --- | --- | --- |")
    tps1 = base["tokens"] / base["executor_s"] / counts[0]
    for n, r in results.items():
        per_dev = [t / s if s else 0.0 for t, s in zip(r["rank_tokens"], r["rank_seconds"])]
        total = r["tokens"] / r["executor_s"]
        print(f"| {n} | {' / '.join(f'{x:,.0f}' for x in per_dev)} | {total:,.0f} | {total / (n * tps1):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
