"""Everything tests/engine/test_vllm_backend.py asks of ``vllm:DIR``, in ONE process with ONE engine.

Runs under ``$EVALDAG_VLLM_PYTHON`` (a venv with vLLM and evaldag; the main venv has neither
vLLM nor a transformers vLLM accepts), because an engine start costs 25-130 s on CPU:

    python tests/vllm_driver.py MODEL_DIR REQUESTS.json OUT.json WORKDIR [LORA_ADAPTER_DIR ...]

and writes OUT.json: the adapter's answers to the requests (token statistics, generations
through the executor), two CLI runs (TOFU's token metrics + ROUGE through vLLM alone; Min-K%++
with ``--fallback hf:``; a sweep of ``vllm:LORA_ADAPTER_DIR``s, run first so its
LoRA engine serves the rest), the one-line errors of two bad inputs, how many engines started,
and whether the engine's processes were gone after ``free()``. The test compares them with
``hf:`` in the main venv. vLLM spawns its engine: all of it under ``__main__``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOFU_TINY = REPO / "tests" / "fixtures" / "tofu_tiny"
HEAD_DIM_16 = REPO / "tests" / "fixtures" / "tiny-llama" / "target"
ENGINE = ["--dtype", "fp32", "--max-model-len", "512", "--enforce-eager"]


def cli(argv: list[str]) -> dict:
    from evaldag.engine.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return {"code": code, "stderr": err.getvalue(), "stdout": out.getvalue()[-3000:]}


def run_json(out: Path) -> dict:
    found = sorted(out.rglob("run.json"))
    return json.loads(found[0].read_text()) if found else {}


def main() -> None:
    model, reqs_file, out_file, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    os.environ["EVALDAG_CACHE_DIR"] = str(work / "cache")
    from evaldag.engine.adapters import spec
    from evaldag.engine.adapters.vllm import vllm_engine
    from evaldag.engine.executor import Executor
    from evaldag.engine.requests import Generate, GenerationSettings, TokenStats

    got: dict = {}
    spec_in = json.loads(reqs_file.read_text())
    # bad input first: both are refused before any engine starts
    got["head_dim"] = cli(["run", "tofu", "--model", f"vllm:{HEAD_DIM_16}", *ENGINE, "--tofu-data", str(TOFU_TINY),
                           "--metrics", "forget_Q_A_Prob", "--out", str(work / "bad-head")])
    got["head_dim"]["wrote"] = (work / "bad-head").exists()
    got["plan"] = cli(["run", "tofu", "--model", f"vllm:{model}", *ENGINE, "--tofu-data", str(TOFU_TINY),
                       "--metrics", "mia_min_k_plus_plus", "--out", str(work / "bad-plan")])
    got["plan"]["wrote"] = (work / "bad-plan").exists()
    got["engines_before"] = len(vllm_engine.START_SECONDS)

    # vllm:ADAPTER_DIR first: its engine (LoRA on) then serves the plain base too, so still ONE start
    loras = [Path(p) for p in sys.argv[5:]]
    if loras:  # a sweep of adapters over one base: one engine for all of them
        lora_dir = loras[0]
        got["lora"] = cli(["run", "tofu", *[x for d in loras for x in ("--model", f"vllm:{d}")], *ENGINE,
                           "--tofu-data", str(TOFU_TINY), "--metrics", spec_in["lora_metrics"], "--out",
                           str(work / "lora"), "--quiet"])
        got["lora"]["summaries"] = {d.name: json.loads(next((work / "lora" / d.name).rglob("TOFU_SUMMARY.json")).read_text())
                                    for d in loras if (work / "lora" / d.name).is_dir()}
        got["lora"]["summary"] = got["lora"]["summaries"].get(lora_dir.name, {})
        got["lora"]["run"] = run_json(work / "lora" / lora_dir.name)
        got["lora"]["engines"] = len(vllm_engine.START_SECONDS)
        lm = spec.resolve(f"vllm:{lora_dir}", dtype="fp32", max_model_len=512, enforce_eager=True)
        got["lora"]["fingerprint"] = lm.fingerprint()

    m = spec.resolve(f"vllm:{model}", dtype="fp32", max_model_len=512, enforce_eager=True)
    t0 = time.perf_counter()
    adapter = m.load()
    got["load_seconds"] = time.perf_counter() - t0
    stats = adapter.run_batch([TokenStats(tuple(c), tuple(x)) for c, x in spec_in["token_stats"]])
    got["token_stats"] = [{"logprob": s.logprob.tolist(), "argmax": s.argmax.tolist(),
                           "mu_absent": s.mu is None and s.var is None} for s in stats]
    gens = [Generate(tuple(p), GenerationSettings(**s)) for p, s in spec_in["generate"]]
    calls = adapter.generate_calls
    answers = Executor().serve([(m, g) for g in gens])  # all of one stage: ONE LLM.generate call
    got["generate_calls"] = adapter.generate_calls - calls
    got["generate"] = [{"ids": a.token_ids.tolist(), "text": a.text} for a in answers]
    alone = Executor().serve([(m, g) for g in gens if g.settings.do_sample][:1])
    got["sampled_alone"] = {"ids": alone[0].token_ids.tolist()} if alone else None
    got["identity"] = m.identity().describe()
    got["fingerprint"] = m.fingerprint()

    got["tofu"] = cli(["run", "tofu", "--model", f"vllm:{model}", *ENGINE, "--tofu-data", str(TOFU_TINY),
                       "--max-new-tokens", "16", "--metrics", spec_in["tofu_metrics"], "--out", str(work / "tofu"), "--quiet"])
    got["tofu"]["run"] = run_json(work / "tofu")
    summary = sorted((work / "tofu").rglob("TOFU_SUMMARY.json"))
    got["tofu"]["summary"] = json.loads(summary[0].read_text()) if summary else {}
    evals = sorted((work / "tofu").rglob("TOFU_EVAL.json"))
    got["tofu"]["notes"] = sorted({str(v.get("reason")) for v in json.loads(evals[0].read_text()).values()
                                   if isinstance(v, dict) and v.get("reason")}) if evals else ["no TOFU_EVAL.json"]
    got["routed"] = cli(["run", "tofu", "--model", f"vllm:{model}", "--fallback", f"hf:{model}", *ENGINE,
                         "--tofu-data", str(TOFU_TINY), "--max-new-tokens", "16",
                         "--metrics", "mia_min_k_plus_plus,forget_Q_A_ROUGE", "--out", str(work / "routed"), "--quiet"])
    # same cache as the vLLM-only run: its forget qa_stats node (mu/var NaN) must not come back here
    got["routed"]["run"] = run_json(work / "routed")
    got["engines"] = len(vllm_engine.START_SECONDS)
    got["engine_start_seconds"] = vllm_engine.START_SECONDS

    t0 = time.perf_counter()
    vllm_engine.free()
    got["free_seconds"] = time.perf_counter() - t0
    got["children_after_free"] = vllm_engine._engine_children()
    out_file.write_text(json.dumps(got, default=str))


if __name__ == "__main__":
    main()
