"""open-unlearning's evaluator and ``evaldag run tofu`` on a real model, one after the other.

The speed goal is a ratio of CPU seconds on the same work: the TOFU-size bench's metrics
(``bench_tofu_scale.METRICS``; open-unlearning gets ``run_ou.sh``'s defaults, the same list), the
whole TOFU-format fixture (``tests/fixtures/tofu_tiny``, 40 rows a split), one torch thread
each, open-unlearning first, then evaldag with a cold cache, for every checkpoint named. CPU
seconds are the child's and its children's user + system (``RUSAGE_CHILDREN``); wall seconds and
the 1-minute load (``uptime``) are printed beside them because this machine is shared.

    python tests/perf/open_unlearning/side_by_side.py --workdir /tmp/sbs \\
        --model base=/work/offset/smol-445 --model unlearned=/tmp/ouft/unlearned [--template chat]

A checkpoint must load in open-unlearning's transformers 4.45 (``realmodel_finetuned.py``'s
folders do; so does a ``save_pretrained`` of 4.45). ``--template chat`` maps to open-unlearning's
``Qwen2.5-1.5B-Instruct`` model config (ChatML through the tokenizer's own template, its default
system prompt), ``plain`` to ``phi-1_5``. Results go to ``WORKDIR/side_by_side.json``. ``--tools ou`` or ``--tools evaldag`` runs one side
only and keeps the other side's figures already in that file (each side records its load and
time of day): open-unlearning's half-hour runs can go first, evaldag's after a code change.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "tests" / "perf"))
from bench_tofu_scale import METRICS  # noqa: E402 - after the path above

FIXTURE = ROOT / "tests" / "fixtures" / "tofu_tiny"
TEMPLATES = {"plain": ("phi-1_5", []), "chat": ("Qwen2.5-1.5B-Instruct", ["model.template_args.system_prompt=null"])}


def load() -> float:
    return os.getloadavg()[0]


def timed(cmd: list[str], env: dict, log: Path) -> dict:
    """Wall and CPU seconds (the child and its children) of one command, the load before and after."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0, t0 = load(), time.time()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if rc:
        sys.exit(f"failed ({rc}): {' '.join(cmd[:3])} ...; see {log}")
    return {"at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "load_before": round(load0, 1), "load_after": round(load(), 1),
            "max_rss_mb": round(after.ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=FOLDER, in the order to run")
    ap.add_argument("--template", default="chat", choices=sorted(TEMPLATES))
    ap.add_argument("--data", type=Path, default=FIXTURE)
    ap.add_argument("--ou-repo", type=Path, default=Path(os.environ.get("OU_REPO", "/work/ou-repo")))
    ap.add_argument("--ou-venv", type=Path, default=Path(os.environ.get("OU_VENV", "/work/ou-venv")))
    ap.add_argument("--tools", default="ou,evaldag", help="which sides to run: ou, evaldag or both (the default)")
    args = ap.parse_args()
    tools = set(args.tools.split(","))
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    results_path = work / "side_by_side.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    cfg, overrides = TEMPLATES[args.template]
    base_env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for spec in args.model:
        name, folder = spec.split("=", 1)
        folder = str(Path(folder).resolve())
        key = f"{name}-{args.template}"
        ou_out, ev_out, cache = work / "ou" / key, work / "evaldag" / key, work / "cache" / key
        shutil.rmtree(cache, ignore_errors=True)
        (work / "logs").mkdir(exist_ok=True)
        ou_env = {**base_env, "OU_REPO": str(args.ou_repo), "OU_VENV": str(args.ou_venv), "OU_MODEL": cfg}
        prev = results.get(key, {}) if results.get(key, {}).get("model") == folder else {}
        ou = prev.get("open_unlearning")
        if "ou" in tools:
            print(f"{key}: open-unlearning, load {load():.1f}", flush=True)
            ou = timed([str(HERE / "run_ou.sh"), str(args.data), folder, str(ou_out), *overrides], ou_env,
                       work / "logs" / f"ou-{key}.log")
            print(f"  {ou}", flush=True)
        ev = prev.get("evaldag")
        if "evaldag" in tools:
            ev_cmd = [str(Path(sys.executable).with_name("evaldag")), "run", "tofu", "--quiet", "--model", folder,
                      "--data", str(args.data), "--metrics", METRICS, "--template", args.template, "--dtype", "fp32",
                      "--device", "cpu", "--out", str(ev_out), "--cache-dir", str(cache)]
            print(f"{key}: evaldag, load {load():.1f}", flush=True)
            ev = timed(ev_cmd, base_env, work / "logs" / f"evaldag-{key}.log")
            run = json.loads((ev_out / "run.json").read_text())
            ev["by_kind_s"] = {k: round(v["seconds"], 1) for k, v in run["executor"]["by_kind"].items()}
            print(f"  {ev}", flush=True)
        results[key] = {"model": folder, "open_unlearning": ou, "evaldag": ev}
        if ou and ev:
            ratio = ev["cpu_s"] / ou["cpu_s"]
            results[key].update(cpu_ratio=round(ratio, 3), wall_ratio=round(ev["wall_s"] / ou["wall_s"], 3))
            print(f"== {key}: evaldag / open-unlearning = {ratio:.3f} CPU ({ev['cpu_s']} / {ou['cpu_s']} CPU s), "
                  f"{ev['wall_s'] / ou['wall_s']:.3f} wall ({ev['wall_s']} / {ou['wall_s']} s)", flush=True)
        results_path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
