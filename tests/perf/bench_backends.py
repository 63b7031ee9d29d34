"""Every backend on the same work: ``hf:``, ``vllm:`` (in-process) and ``openai:`` (a vLLM server).

Run: python tests/perf/bench_backends.py [--vllm-python PY] [--gpu] [--rows N] [--new-tokens N]
         [--skip-server] [--skip-tofu] [--only-tofu BACKEND] [--open-unlearning-seconds S] [--workdir DIR]
         [--model FOLDER] [--only-backends hf,vllm]

Two workloads from bench_tofu_scale.py's TOFU-size data (forget10 size, a random Llama whose
greedy generations never meet an eos, so every row runs all its new tokens):

* generation-heavy: the forget10 questions, greedy, ``--new-tokens`` (200) new tokens each;
* scoring-heavy: token statistics of every forget/holdout/retain question-answer pair.

Each backend runs in a fresh process (cold: start-up counted apart), through evaldag's
executor exactly as a run would; printed per backend and request kind: wall seconds,
rows, tokens/s and the ratio to ``hf:``. For ``vllm:`` also raw ``LLM.generate`` on the
same prompts in the same engine, and evaldag's tokens/s as a share of it (goal >= 0.9).
Then the whole ``evaldag run tofu`` at TOFU size through each backend (``--fallback hf:``
for what vLLM and a server cannot compute) against open-unlearning's time
(tests/perf/open_unlearning/; the issue's 315 s unless ``--open-unlearning-seconds``).
``--only-tofu BACKEND`` runs just that backend's whole run (no per-kind workers): one row
can be measured alone when the whole script would not fit a time limit.

``--model FOLDER``: the real-model row, that checkpoint (SmolLM2-135M-Instruct's fp32
folder: tests/realmodel.py) on the TOFU-format fixture (at most 40 rows a split; its
generations stop at eos, so the new tokens are fewer than asked). Every worker prints CPU
seconds beside wall seconds: the worker process's own for each kind (``time.process_time``;
vLLM's engine core runs in a process of its own, so for ``vllm:`` only the whole worker's
CPU seconds, children included, count it).

CPU (default): the 4-layer 256-wide Llama in fp32; on CPU vLLM is a correctness check, not
a speed lever. ``--gpu``: a random Llama with a 1B-size config (Llama-3.2-1B's shapes) in
bf16, for a machine with a GPU and a CUDA vLLM (``--vllm-python`` names its interpreter).
vLLM runs from its own venv (``--vllm-python``, default ``$EVALDAG_VLLM_PYTHON`` or
``.venv-vllm/bin/python``), which must have evaldag installed too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # tests.perf.bench_tofu_scale, tests.servers


def requests(model: Path, data: Path, rows: int, new: int, dtype: str) -> dict:
    """The two workloads as plain lists (ids built once, by the HF encoder, for every backend)."""
    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf import HFModel

    enc = HFModel(str(model), dtype=dtype, device="cpu").encoder()
    plain = PromptTemplate.plain()
    read = lambda name: [json.loads(x) for x in (data / f"{name}.json").read_text().splitlines() if x.strip()]  # noqa: E731
    forget = read("forget10")[:rows]
    gen = [list(enc.encode_qa(r["question"], r["answer"], plain).prompt_ids) for r in forget]
    stats = []
    for name in ("forget10", "holdout10", "retain90"):
        for r in read(name)[:rows]:
            e = enc.encode_qa(r["question"], r["answer"], plain)
            stats.append([list(e.context_ids), list(e.continuation_ids)])
    return {"generate": gen, "token_stats": stats, "new": new}


# ---------------------------------------------------------------------------- one backend, one process

def worker(backend: str, spec: str, reqs_file: Path, out_file: Path, dtype: str, **quals: str) -> None:
    """Time one backend cold: resolve + load, then each workload through an Executor."""
    from evaldag.engine.adapters import spec as specs
    from evaldag.engine.executor import Executor
    from evaldag.engine.requests import Generate, GenerationSettings, TokenStats

    w = json.loads(reqs_file.read_text())
    t0 = time.perf_counter()
    kw = {"dtype": dtype, **quals} if backend != "openai" else quals
    model = specs.resolve(spec, **kw)
    model.load()
    out: dict = {"start_seconds": time.perf_counter() - t0}
    settings = GenerationSettings(max_new_tokens=w["new"])
    work = {"token_stats": [TokenStats(tuple(c), tuple(x)) for c, x in w["token_stats"]],
            "generate": [Generate(tuple(p), settings) for p in w["generate"]]}
    for kind, reqs in work.items():
        t, c = time.perf_counter(), time.process_time()
        got = Executor().serve([(model, r) for r in reqs])
        secs, cpu = time.perf_counter() - t, time.process_time() - c
        tokens = sum(len(g.token_ids) for g in got) if kind == "generate" else sum(r.length() for r in reqs)
        out[kind] = {"seconds": secs, "cpu_seconds": cpu, "rows": len(reqs), "tokens": tokens}
    if backend == "vllm":  # the anchor: raw LLM.generate on the same prompts, same engine, same settings
        from vllm import SamplingParams

        from evaldag.engine.adapters import vllm_engine

        llm = vllm_engine.engine(model.options())
        sp = SamplingParams(max_tokens=w["new"], temperature=0, ignore_eos=True, detokenize=False)
        t = time.perf_counter()
        raw = llm.generate([{"prompt_token_ids": p} for p in w["generate"]], sp, use_tqdm=False)
        out["raw_generate"] = {"seconds": time.perf_counter() - t, "rows": len(raw),
                               "tokens": sum(len(o.outputs[0].token_ids) for o in raw)}
        vllm_engine.free()
    out_file.write_text(json.dumps(out))


def run_worker(py: str, backend: str, spec: str, tmp: Path, dtype: str, *extra: str) -> dict:
    out = tmp / f"worker-{backend}.json"
    argv = [py, __file__, "--worker", backend, "--spec", spec, "--requests", str(tmp / "requests.json"),
            "--worker-out", str(out), "--dtype", dtype, *extra]
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = json.loads(out.read_text())
    got["worker_cpu_seconds"] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return got


def evaldag_run(py: str, model: str, data: Path, out: Path, cache: Path, *extra: str) -> tuple[float, dict]:
    """One cold ``evaldag run tofu`` in its own process: (wall seconds, run.json)."""
    from tests.perf.bench_tofu_scale import METRICS

    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    argv = [py, "-m", "evaldag.engine.cli", "run", "tofu", "--quiet", "--model", model, "--data", str(data),
            "--metrics", METRICS, "--out", str(out), "--cache-dir", str(cache), *extra]
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t, json.loads((out / "run.json").read_text())


def table(results: dict) -> list[str]:
    base = {k: results["hf"][k]["tokens"] / results["hf"][k]["seconds"] for k in ("generate", "token_stats")}
    lines = [f"  {'backend':<9}{'kind':<13}{'start s':>8}{'seconds':>9}{'CPU s':>8}{'rows':>6}{'tokens':>9}{'tok/s':>9}{'x hf':>7}"]
    for name, r in results.items():
        for kind in ("generate", "token_stats", "raw_generate"):
            if kind not in r:
                continue
            s = r[kind]
            tps = s["tokens"] / s["seconds"] if s["seconds"] else 0.0
            ratio = tps / base.get(kind, base["generate"])
            lines.append(f"  {name:<9}{kind:<13}{r['start_seconds']:>8.1f}{s['seconds']:>9.1f}{s.get('cpu_seconds', 0.0):>8.1f}"
                         f"{s['rows']:>6d}{s['tokens']:>9d}{tps:>9.0f}{ratio:>7.2f}")
        lines.append(f"  {name:<9}whole worker CPU s (start-up and children included): {r.get('worker_cpu_seconds', 0.0):.1f}")
    if "vllm" in results and "raw_generate" in results["vllm"]:
        v = results["vllm"]
        share = (v["generate"]["tokens"] / v["generate"]["seconds"]) / (v["raw_generate"]["tokens"] / v["raw_generate"]["seconds"])
        lines.append(f"  vllm: evaldag's generation tokens/s = {share:.2f} x raw LLM.generate's (goal >= 0.9)")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vllm-python", default=os.environ.get("EVALDAG_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--gpu", action="store_true", help="a random Llama with a 1B-size config in bf16 (needs a GPU)")
    ap.add_argument("--rows", type=int, default=400, help="rows per split (400 = TOFU forget10 size)")
    ap.add_argument("--new-tokens", type=int, default=200)
    ap.add_argument("--skip-server", action="store_true", help="no openai: (vLLM server) column")
    ap.add_argument("--skip-tofu", action="store_true", help="no whole `evaldag run tofu` per backend")
    ap.add_argument("--only-tofu", choices=["hf", "vllm", "openai"], default=None,
                    help="only this backend's whole `evaldag run tofu` (no per-kind workers, no table)")
    ap.add_argument("--open-unlearning-seconds", type=float, default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--model", default=None, metavar="FOLDER", help="the real-model row: this checkpoint on the TOFU fixture")
    ap.add_argument("--only-backends", default="hf,vllm", help="the per-kind workers to run (hf always)")
    # worker mode (internal)
    ap.add_argument("--worker", default=None)
    ap.add_argument("--spec", default=None)
    ap.add_argument("--requests", default=None)
    ap.add_argument("--worker-out", default=None)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--max-model-len", default=None)
    args = ap.parse_args()
    if args.worker:
        quals = {k: v for k, v in (("tokenizer", args.tokenizer), ("max_model_len", args.max_model_len)) if v}
        if args.worker == "vllm":
            quals["enforce_eager"] = "1"
        worker(args.worker, args.spec, Path(args.requests), Path(args.worker_out), args.dtype, **quals)
        return
    bench(args)


def bench(args: argparse.Namespace) -> None:
    from tests.perf.bench_tofu_scale import ONE_B, OPEN_UNLEARNING_S, SMALL, load, random_llama, write_data
    from tests.servers import RunningServer, free_port

    dtype = "bf16" if args.gpu else "fp32"
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(args.workdir) if args.workdir else Path(t)
        tmp.mkdir(parents=True, exist_ok=True)
        shape = ONE_B if args.gpu else SMALL
        if args.model:  # the real-model row: the checkpoint on the TOFU-format fixture
            data, model = REPO / "tests" / "fixtures" / "tofu_tiny", Path(args.model)
            args.rows = min(args.rows, 40)
        else:
            data = tmp / "data"
            write_data(data)
            model = random_llama(tmp / ("random-1b" if args.gpu else "random-4x256"), shape, "bfloat16" if args.gpu else "float32")
        (tmp / "requests.json").write_text(json.dumps(requests(model, data, args.rows, args.new_tokens, dtype)))
        where = "GPU" if args.gpu else "CPU"
        what = (f"{model.name}" if args.model else f"random Llama {shape['num_hidden_layers']} layers x "
                f"{shape['hidden_size']} (head_dim {shape['hidden_size'] // shape['num_attention_heads']})")
        print(f"{where}: {what}, {dtype}; {args.rows} rows per split, {args.new_tokens} new tokens; {load()}")
        mlen = "1024" if not args.gpu else "2048"
        only = args.only_tofu
        results = {}
        if not only:
            results["hf"] = run_worker(sys.executable, "hf", f"hf:{model}", tmp, dtype)
            if "vllm" in args.only_backends.split(","):
                results["vllm"] = run_worker(args.vllm_python, "vllm", f"vllm:{model}", tmp, dtype, "--max-model-len", mlen)
        srv = None
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # so `finally` runs
        try:
            if not args.skip_server and only in (None, "openai"):
                port = free_port()
                vdt = "bfloat16" if args.gpu else "float32"
                srv = RunningServer("vLLM", [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                                             "--served-model-name", "m", "--dtype", vdt, "--max-model-len", mlen,
                                             "--enforce-eager", "--seed", "0", "--host", "127.0.0.1", "--port", str(port)],
                                    port, tmp / "vllm-server.log", "/health")
                t0 = time.perf_counter()
                why = srv.wait_ready(900)
                if why:
                    print(f"  openai: server did not start: {why}")
                    srv.stop()
                    srv = None
                elif only:
                    print(f"  vLLM server ready in {time.perf_counter() - t0:.1f} s")
                else:
                    print(f"  vLLM server ready in {time.perf_counter() - t0:.1f} s")
                    results["openai"] = run_worker(sys.executable, "openai", f"openai:{srv.url}/v1", tmp,
                                                   dtype, "--tokenizer", str(model))
            if not only:
                print("\n".join(table(results)))
            if not args.skip_tofu or only:
                ou = args.open_unlearning_seconds or OPEN_UNLEARNING_S
                print(f"\nwhole `evaldag run tofu` (TOFU size, cold) vs open-unlearning's {ou:.0f} s:")
                runs = [("hf", sys.executable, f"hf:{model}", []),
                        ("vllm", args.vllm_python, f"vllm:{model}", ["--fallback", f"hf:{model}", "--max-model-len", mlen,
                                                                   "--enforce-eager"])]
                if srv is not None:
                    runs.append(("openai", sys.executable, f"openai:{srv.url}/v1", ["--tokenizer", str(model), "--fallback",
                                                                                    f"hf:{model}"]))
                for name, py, spec, extra in [r for r in runs if only in (None, r[0])]:
                    secs, run = evaldag_run(py, spec, data, tmp / f"tofu-{name}", tmp / f"cache-{name}", "--dtype", dtype, *extra)
                    gen = run["executor"]["by_kind"].get("generate", {}).get("seconds", 0.0)
                    print(f"  {name:<7} {secs:7.1f} s wall = {secs / ou:.3f} x open-unlearning (generation {gen:.1f} s)")
        finally:  # the server's process group, whatever happened (an interrupted run must not leave it behind)
            if srv is not None:
                srv.stop()
        print(f"\n{load()}")


if __name__ == "__main__":
    main()
