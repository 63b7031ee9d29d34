"""``openai:`` against ``transformers serve``: a real server that generates but takes text
prompts only and gives no log-probs. Generation works and equals ``hf:``; the planner
refuses token statistics before anything runs, naming the way out; ``--fallback hf:DIR``
sends just those to the local weights and run.json says which backend served what."""

from __future__ import annotations

import argparse

import pytest

from evaldag.engine import run
from evaldag.engine.adapters import spec
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.adapters.openai.openai_model import OpenAIModel
from evaldag.engine.registry import BENCHMARKS
from evaldag.engine.planner import PlanError
from evaldag.engine.requests import Generate, GenerateText, GenerationSettings

from ..servers import TOFU_TINY


@pytest.fixture(scope="module")
def served(server_model, serve_server):
    mdir, tdir = server_model
    return OpenAIModel(serve_server.url + "/v1", tokenizer=str(tdir)).check()


def test_generation_through_a_text_only_server_equals_hf(served, server_model):
    hf = HFModel(server_model[0], dtype="fp32", device="cpu")
    enc = hf.encoder()
    reqs = [Generate(tuple(enc.encode(t)), GenerationSettings(max_new_tokens=12))
            for t in ("The capital of France is", "Where was the author Dara Ilves born?")]
    want, got = hf.load().run_batch(reqs), served.load().run_batch(reqs)
    assert [g.text for g in got] == [w.text for w in want]
    d = served.describe()
    assert (d["gen_mode"], d["logprob_mode"], d["tokenizer_checked"]) == ("text", "none", False)
    assert served.capabilities().kinds == frozenset({"generate", "generate_text"})


def test_text_requests_go_to_the_server_as_text(served, server_model):
    """GenerateText (the kind text backends serve): the prompt goes as is; the server adds its
    bos, so the answer equals hf:'s greedy answer to the encoded prompt."""
    hf = HFModel(server_model[0], dtype="fp32", device="cpu")
    prompt = "Where was the author Dara Ilves born?"
    want = hf.load().run_batch([Generate(tuple(hf.encoder().encode(prompt)), GenerationSettings(max_new_tokens=12))])
    got = served.load().run_batch([GenerateText(prompt, GenerationSettings(max_new_tokens=12))])
    assert got[0].text == want[0].text and len(got[0].token_ids) == 0


def tofu(model_dir, model, metrics, cache):
    bench = BENCHMARKS.get("tofu")
    p = argparse.ArgumentParser(conflict_handler="resolve")
    bench.add_arguments(p)
    p.add_argument("--model")  # the CLI owns --model (engine/options.py); a run sees one string
    args = p.parse_args(["--model", str(model_dir), "--tofu-data", str(TOFU_TINY), "--max-new-tokens", "8"])
    args.metrics, args.benchmarks = metrics, ["tofu"]
    nodes, resources = bench.build(bench.config_from_args(args))
    return run(nodes, {**resources, "model": model}, cache=cache, init_cache=True)


def test_planner_refuses_token_statistics_then_fallback_serves_them(served, server_model, serve_server, tmp_path):
    mdir, tdir = server_model
    with pytest.raises(PlanError) as e:
        tofu(mdir, served, "forget_Q_A_Prob", tmp_path / "refused")
    msg = str(e.value)
    assert "\n" not in msg and f"{served.spec} gives generation" in msg and "add --model-arg fallback=hf:DIR" in msg
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").rglob("*.safetensors"))

    routed = spec.resolve(f"openai:{serve_server.url}/v1", tokenizer=str(tdir), fallback=str(mdir))
    out = tofu(mdir, routed, "forget_Q_A_Prob,forget_Q_A_ROUGE", tmp_path / "routed")
    assert out.ok
    by_backend = {r.name: r.backend["model"] for r in out.records.values() if r.backend}
    assert sorted(by_backend.values()) == sorted([f"hf:{mdir}", served.spec]), by_backend
    stats = next(k for k in by_backend if k.startswith("qa_stats"))
    gens = next(k for k in by_backend if k.startswith("qa_generations"))
    assert by_backend[stats] == f"hf:{mdir}" and by_backend[gens] == served.spec
