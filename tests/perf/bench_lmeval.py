"""lm-evaluation-harness tasks through its own HFLM and through ``evaldag run lmeval``: wall time and forward rows.

    .venv/bin/python tests/perf/bench_lmeval.py [--rows 60] [--model tests/fixtures/tiny-llama/target]

The tasks are the test tasks (``tests/benchmarks/lmeval_tasks.py``: multiple choice, generation,
rolling log-likelihood) over ``--rows`` rows (at most the TOFU fixture's 40). Printed: HFLM at its default batch size (1) and at
``auto``, then evaldag cold (empty cache) and warm (the same command again), each with its wall
seconds and the rows it put through the model (HFLM: the requests handed to its scoring and
generation, rolling windows counted one each; evaldag: the executor's ``sequences_forwarded``).
Every run is a fresh process, so imports count; both index only the test tasks' folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# measured 2026-11-24 on the shared 2-core machine under load (40 rows; 200 rows forwarded by each):
# HFLM batch_size=1 50.0 s, HFLM batch_size=auto 175.4 s (its batch-size search on CPU),
# evaldag cold 36.1 s, evaldag warm 6.1 s (no weights, no torch: the node store and the task index).
# The real-model row (docs/performance.md): --model SmolLM2's fp32 folder --rows 20 --skip-auto.

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

HFLM_SCRIPT = """
import sys, json, time, lm_eval
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager
model, tasks, bs = sys.argv[1], sys.argv[2], sys.argv[3]
lm = HFLM(pretrained=model, dtype="float32", device="cpu", batch_size=bs if bs == "auto" else int(bs))
rows = {"n": 0}
for name in ("loglikelihood", "generate_until"):
    orig = getattr(lm, "_loglikelihood_tokens" if name == "loglikelihood" else name)
    def wrap(*a, _orig=orig, **k):
        rows["n"] += len(k["requests"] if "requests" in k else a[0])
        return _orig(*a, **k)
    setattr(lm, "_loglikelihood_tokens" if name == "loglikelihood" else name, wrap)
lm_eval.simple_evaluate(model=lm, tasks=tasks.split(","), task_manager=TaskManager(include_path=sys.argv[4], include_defaults=False),
                        bootstrap_iters=100, log_samples=False)
print(json.dumps(rows))
"""


def timed(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child: user + system, stdout)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=60)
    ap.add_argument("--model", default=str(REPO / "tests" / "fixtures" / "tiny-llama" / "target"),
                    help="a checkpoint folder (the real-model row: SmolLM2-135M-Instruct's fp32 folder, tests/realmodel.py)")
    ap.add_argument("--skip-auto", action="store_true", help="no HFLM batch_size=auto (its batch-size search is long on CPU)")
    args = ap.parse_args()
    import tests.benchmarks.lmeval_tasks as lt

    lt.ROWS = args.rows
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    tasks = "fx_mc,fx_gen,fx_roll"
    with tempfile.TemporaryDirectory() as tmp:
        folder = lt.write_tasks(Path(tmp) / "tasks")
        print(f"{Path(args.model).name}, {args.rows} rows, tasks {tasks}; load {os.getloadavg()[0]:.1f}")
        print(f"{'runner':28s} {'wall s':>8s} {'CPU s':>8s} {'rows forwarded':>15s}")
        for bs in ("1",) if args.skip_auto else ("1", "auto"):
            secs, cpu, out = timed([sys.executable, "-c", HFLM_SCRIPT, args.model, tasks, bs, str(folder)], env)
            print(f"{'HFLM batch_size=' + bs:28s} {secs:8.2f} {cpu:8.2f} {json.loads(out.splitlines()[-1])['n']:15d}")
        cmd = [sys.executable, "-m", "evaldag.engine.cli", "run", "lmeval", "--tasks", tasks, "--include-path", str(folder),
               "--model", args.model, "--dtype", "fp32", "--device", "cpu", "--bootstrap-iters", "100",
               "--out", str(Path(tmp) / "out"), "--cache-dir", str(Path(tmp) / "cache"), "--quiet"]
        for label in ("evaldag cold", "evaldag warm"):
            secs, cpu, _ = timed(cmd, env)
            ex = json.loads((Path(tmp) / "out" / "run.json").read_text())["executor"]
            print(f"{label:28s} {secs:8.2f} {cpu:8.2f} {ex['sequences_forwarded']:15d}   (model loaded: {ex['model_loaded']})")
        print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
