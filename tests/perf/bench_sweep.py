"""Benchmark: sweeps of K checkpoints, cold and warm, one process against two ranks and two shards.

Run on purpose (pytest does not collect ``bench_*.py``)::

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python tests/perf/bench_sweep.py                 # K = 1, 4, 16, tiny workload
    python tests/perf/bench_sweep.py --k 1,4 --workload tofu-scale                      # the ratio's workload
    python tests/perf/bench_sweep.py --gpu --k 1,4,16                                   # 1B-size bf16 on CUDA
    python tests/perf/bench_sweep.py --k 1,4 --workload tofu-scale --modes process,requests,checkpoints,auto

For each K it makes K checkpoints (the base with one MLP weight nudged by a different
factor each: K models, K fingerprints, one shape), then times ``evaldag run tofu --model
C1 ... --model CK`` on an empty cache (cold) and again on that cache (warm), in these modes:

* ``1 process``: the sweep in one process;
* ``2 ranks, --parallel MODE``: under ``torchrun --nproc-per-node 2`` (gloo on CPU, NCCL on
  CUDA), for each of ``requests``, ``checkpoints`` and ``auto`` when the installed ``evaldag
  run`` has ``--parallel``; without it, one ``2 ranks`` row (today's
  request sharding) and ``n/a`` for each mode;
* ``2 shards``: ``--shard 0/2`` and ``--shard 1/2`` started at once on one cache (a job
  array on a shared cache).

Printed per row: wall seconds (the whole command, start-up included), checkpoints per
hour, and the ratio of K separate open-unlearning runs (K x ``--open-unlearning-seconds``,
one run of open-unlearning's evaluator on one checkpoint of the same workload, timed with
``tests/perf/open_unlearning/``; each such run recomputes everything, so K runs cost K
times one) to this row's cold time; ``n/a`` when no such time is known. Workloads:

* ``tiny`` (default): the fixture TOFU data and tiny Llama, ``--metrics`` (default a
  token-statistics, a generation and a retain-side metric); no open-unlearning time unless
  given;
* ``tofu-scale``: ``bench_tofu_scale.py``'s workload (forget10-size synthetic authors, a
  random 4x256 Llama, its 15 metrics), the one ``tests/perf/open_unlearning/`` times; its
  default open-unlearning time is that script's 315 s (time it again on the day).

``--gpu`` makes the base a random Llama of Llama-3.2-1B's shapes in bf16 (as
``bench_tofu_scale.py``'s GPU mode) and runs on CUDA (two ranks need two devices; with
one, the rank rows are skipped). Each 1B checkpoint takes 2.5 GB of disk.

``--modes`` keeps only some rows (``process``, ``requests``, ``checkpoints``, ``auto``,
``shards``), so a bounded time buys the rows that matter; ``bench_sweep.json`` is rewritten
after every row, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from tests.perf import bench_tofu_scale as scale  # noqa: E402 - after the environment above

FIX = Path(__file__).resolve().parents[1] / "fixtures"
BIN = Path(sys.executable).parent
TINY_METRICS = "forget_Q_A_Prob,forget_Q_A_ROUGE,forget_quality"
MODES = ("requests", "checkpoints", "auto")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def has_parallel() -> bool:
    """Whether this evaldag's ``run`` takes ``--parallel``."""
    done = subprocess.run([str(BIN / "evaldag"), "run", "tofu", "--help"], capture_output=True, text=True)
    return "--parallel" in done.stdout


def nudged(base: Path, dest: Path, factor: float) -> Path:
    """``base`` with one MLP weight scaled by ``factor``: another checkpoint of the same shape."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(base, dest)
    for f in sorted(dest.glob("*.safetensors")):
        weights = load_file(str(f))
        names = sorted(k for k in weights if k.endswith("mlp.down_proj.weight"))
        if names:
            weights[names[0]] = weights[names[0]] * factor
            save_file(weights, str(f), metadata={"format": "pt"})
            break
    return dest


def workload(args: argparse.Namespace, tmp: Path) -> tuple[Path, Path, Path, list[str]]:
    """(base checkpoint, retain model, data, extra run flags)."""
    if args.gpu:
        data = tmp / "data"
        scale.write_data(data)
        base = scale.random_llama(tmp / "base", scale.ONE_B, "bfloat16")
        retain = scale.random_llama(tmp / "retain", scale.ONE_B, "bfloat16", seed=1)
        return base, retain, data, ["--metrics", args.metrics or scale.METRICS, "--device", "cuda", "--dtype", "bf16"]
    if args.workload == "tofu-scale":
        data = tmp / "data"
        scale.write_data(data)
        base = scale.random_llama(tmp / "base", scale.SMALL)
        retain = scale.random_llama(tmp / "retain", scale.SMALL, seed=1)
        return base, retain, data, ["--metrics", args.metrics or scale.METRICS]
    tiny = FIX / "tiny-llama"
    return tiny / "target", tiny / "retain", FIX / "tofu_tiny", ["--metrics", args.metrics or TINY_METRICS,
                                                                  "--max-new-tokens", "8"]


def command(ckpts: list[Path], retain: Path, data: Path, extra: list[str]) -> list[str]:
    models = [a for c in ckpts for a in ("--model", str(c))]
    return ["run", "tofu", "--quiet", *models, "--retain-model", str(retain), "--data", str(data), *extra]


def timed(argvs: list[list[str]]) -> float:
    """Start every command at once; the wall seconds until the last one ends (each must succeed)."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}
    t = time.perf_counter()
    procs = [subprocess.Popen(a, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for a in argvs]
    errs = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - t
    for p, err in zip(procs, errs):
        if p.returncode != 0:
            raise SystemExit(f"failed ({p.returncode}): {' '.join(p.args)}\n{err[-3000:]}")
    return wall


def modes(parallel: bool, gpus: int, gpu: bool) -> list[tuple[str, str | None]]:
    """(row name, --parallel value or None; "shards" for the two-shard row; "n/a" for a row not runnable here)."""
    ranks_ok = gpus >= 2 or not gpu
    rows: list[tuple[str, str | None]] = [("1 process", None)]
    if parallel:
        rows += [(f"2 ranks, --parallel {m}", m if ranks_ok else "n/a") for m in MODES]
    else:
        rows += [("2 ranks (request sharding)", "ranks" if ranks_ok else "n/a")]
        rows += [(f"2 ranks, --parallel {m}", "n/a") for m in MODES]
    return rows + [("2 shards at once", "shards")]


def run_mode(mode: str | None, cmd: list[str], out: Path, cache: Path) -> float:
    evaldag = str(BIN / "evaldag")
    if mode == "shards":  # a job array of two on one cache, each its own --out
        return timed([[evaldag, *cmd, "--out", str(out / f"s{i}"), "--cache-dir", str(cache), "--shard", f"{i}/2"]
                      for i in range(2)])
    base_cmd = [*cmd, "--out", str(out), "--cache-dir", str(cache)]
    if mode is None:
        return timed([[evaldag, *base_cmd]])
    launch = [str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(_port()),
              "--no-python", evaldag]
    return timed([[*launch, *base_cmd, *([] if mode == "ranks" else ["--parallel", mode])]])


def cell(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", default="1,4,16", help="checkpoint counts (default 1,4,16)")
    ap.add_argument("--workload", choices=["tiny", "tofu-scale"], default="tiny")
    ap.add_argument("--metrics", default=None, help="override the workload's --metrics")
    ap.add_argument("--gpu", action="store_true", help="a random 1B-size Llama in bf16 on CUDA (tofu-scale data)")
    ap.add_argument("--open-unlearning-seconds", type=float, default=None,
                    help="one open-unlearning run on one checkpoint of this workload (tests/perf/open_unlearning/); "
                         "default: 315 for --workload tofu-scale, else unknown (ratio n/a)")
    ap.add_argument("--workdir", default=None, help="keep checkpoints and outputs here")
    ap.add_argument("--modes", default=None, help="only these rows, comma-separated: process, requests, checkpoints, "
                                                  "auto, shards (default all)")
    args = ap.parse_args()
    ks = sorted({int(k) for k in args.k.split(",")})
    keep = set(args.modes.split(",")) if args.modes else None
    if keep and keep - {"process", "shards", *MODES}:
        raise SystemExit(f"--modes: unknown {', '.join(sorted(keep - {'process', 'shards', *MODES}))}")
    ou = args.open_unlearning_seconds
    if ou is None and args.workload == "tofu-scale" and not args.gpu:
        ou = scale.OPEN_UNLEARNING_S
    gpus = 0
    if args.gpu:
        import torch

        gpus = torch.cuda.device_count()
        if not gpus:
            raise SystemExit("--gpu needs CUDA")
    tmp = Path(args.workdir or tempfile.mkdtemp(prefix="evaldag-sweep-"))
    tmp.mkdir(parents=True, exist_ok=True)
    base, retain, data, extra = workload(args, tmp)
    ckpts = [base] + [nudged(base, tmp / f"ckpt-{i:02d}", 1.0 + 0.01 * i) for i in range(1, max(ks))]
    parallel = has_parallel()
    print(f"workload {'gpu-1b-bf16' if args.gpu else args.workload}; {scale.load()}; --parallel "
          f"{'present' if parallel else 'absent (n/a rows)'}; open-unlearning s/run: {cell(ou, '.1f')}")
    head = f"{'K':>3}  {'mode':<30}{'cold s':>9}{'warm s':>9}{'ckpt/h cold':>13}{'ckpt/h warm':>13}{'OU ratio':>10}"
    print(head)
    results = []
    key = lambda name: "process" if name == "1 process" else "shards" if name.endswith("shards at once") else name.split()[-1]  # noqa: E731
    for k in ks:
        for name, mode in modes(parallel, gpus, args.gpu):
            if keep is not None and key(name) not in keep:
                continue
            if mode == "n/a":
                print(f"{k:>3}  {name:<30}{'n/a':>9}{'n/a':>9}{'n/a':>13}{'n/a':>13}{'n/a':>10}")
                continue
            slug = name.replace(" ", "_").replace(",", "").replace("-", "")
            out, cache = tmp / f"k{k}" / slug / "out", tmp / f"k{k}" / slug / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
            cmd = command(ckpts[:k], retain, data, extra)
            cold = run_mode(mode, cmd, out, cache)
            warm = run_mode(mode, cmd, out, cache)
            ratio = k * ou / cold if ou else None
            print(f"{k:>3}  {name:<30}{cold:>9.1f}{warm:>9.1f}{3600 * k / cold:>13.0f}{3600 * k / warm:>13.0f}"
                  f"{cell(ratio, '.2f'):>10}", flush=True)
            results.append({"k": k, "mode": name, "cold_s": cold, "warm_s": warm, "ou_ratio": ratio,
                            "load": scale.load()})
            (tmp / "bench_sweep.json").write_text(json.dumps(results, indent=2))
    print(f"figures in {tmp / 'bench_sweep.json'}")


if __name__ == "__main__":
    main()
