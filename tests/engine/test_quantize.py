"""``--attack quantize:...`` (engine/quantize.py): bitsandbytes' own round trip on every decoder
Linear and nowhere else, equal bit for bit to what bitsandbytes (and transformers' bitsandbytes
loading) holds; a run of the attacked model equals a plain run of a folder holding those weights."""

import json
import sys
from pathlib import Path

import pytest
import torch

from evaldag.engine import transforms
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.quantize import quantized_linears

from ..inprocess import run_cli

F = pytest.importorskip("bitsandbytes.functional")
FIX = Path(__file__).resolve().parents[1] / "fixtures"
TARGET = FIX / "tiny-llama" / "target"
DECODER_LINEARS = {f"model.layers.{i}.{p}" for i in range(2) for p in
                   ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}


def _load():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()


def _bnb_round_trip(w, spec):
    p = transforms.parse(spec).params
    if p.method == "int8-weight":
        cb, stats, _ = F.int8_vectorwise_quant(w.to(torch.float16))
        return F.int8_vectorwise_dequant(cb, stats).to(w.dtype)
    packed, state = F.quantize_4bit(w, blocksize=p.blocksize, quant_type=p.method, compress_statistics=p.double_quant)
    return F.dequantize_4bit(packed, state)


@pytest.mark.parametrize("spec", ["quantize:nf4", "quantize:fp4", "quantize:int8-weight",
                                  "quantize:nf4,blocksize=128,double_quant=true"])
def test_every_decoder_linear_is_bitsandbytes_round_trip_and_nothing_else_changes(spec):
    before = _load()
    after = transforms.parse(spec).apply(_load(), None)
    assert {n for n, _ in quantized_linears(after)} == DECODER_LINEARS  # not lm_head
    old = dict(before.named_parameters())
    changed = set()
    for name, p in after.named_parameters():
        module = name.removesuffix(".weight")
        if module in DECODER_LINEARS:
            assert torch.equal(p, _bnb_round_trip(old[name], spec)), name
            assert not torch.equal(p, old[name])
            changed.add(module)
        else:  # lm_head, the embeddings, the norms: untouched, bit for bit
            assert torch.equal(p, old[name]), name
    assert changed == DECODER_LINEARS
    assert "lm_head.weight" in old and "model.embed_tokens.weight" in old


@pytest.mark.parametrize("method", ["nf4", "fp4", "int8"])
def test_equal_to_the_weights_transformers_bitsandbytes_loading_holds(method):
    """``load_in_4bit`` / ``load_in_8bit`` on this CPU: each quantized Linear's weight,
    dequantized by bitsandbytes, equals the round trip bit for bit; lm_head stays a Linear."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    config = (BitsAndBytesConfig(load_in_8bit=True) if method == "int8" else
              BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=method, bnb_4bit_compute_dtype=torch.float32))
    bnb = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32, device_map="cpu", quantization_config=config)
    ours = dict(transforms.parse(f"quantize:{'int8-weight' if method == 'int8' else method}").apply(_load(), None)
                .named_modules())
    seen = set()
    for name, m in bnb.named_modules():
        if type(m).__name__ == "Linear4bit":
            w = F.dequantize_4bit(m.weight.data, m.weight.quant_state)
        elif type(m).__name__ == "Linear8bitLt":
            w = F.int8_vectorwise_dequant(m.weight.data, m.weight.SCB)
        else:
            continue
        assert torch.equal(w.float(), ours[name].weight), name
        seen.add(name)
    assert seen == DECODER_LINEARS and type(bnb.lm_head) is torch.nn.Linear


def _tofu(tmp, out, *extra, model=str(TARGET)):
    return run_cli(["run", "tofu", "--model", model, "--data", FIX / "tofu_tiny", "--limit", "6",
                    "--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE,forget_truth_ratio", "--quiet", "--out", tmp / out,
                    "--cache-dir", tmp / "cache", *extra])


def test_attack_quantize_nf4_gives_the_numbers_of_a_plain_run_on_those_weights(tmp_path):
    proc = _tofu(tmp_path, "out", "--attack", "quantize:nf4", "--attack", "quantize:int8-weight")
    assert proc.returncode == 0, proc.stderr
    for spec, folder in (("quantize:nf4", "quantize_nf4"), ("quantize:int8-weight", "quantize_int8-weight")):
        model = transforms.parse(spec).apply(_load(), None)
        saved = tmp_path / f"saved-{folder}"
        model.save_pretrained(saved)
        for f in TARGET.iterdir():
            if f.name.startswith(("tokenizer", "special_tokens")):
                (saved / f.name).write_bytes(f.read_bytes())
        assert _tofu(tmp_path, f"ref-{folder}", model=str(saved)).returncode == 0
        ref = json.loads((tmp_path / f"ref-{folder}" / "TOFU_EVAL.json").read_text())
        got = json.loads((tmp_path / "out" / "attacks" / folder / "TOFU_EVAL.json").read_text())
        assert got == ref
    plain = json.loads((tmp_path / "out" / "TOFU_SUMMARY.json").read_text())
    nf4 = json.loads((tmp_path / "out" / "attacks" / "quantize_nf4" / "TOFU_SUMMARY.json").read_text())
    assert plain["forget_Q_A_Prob"] != nf4["forget_Q_A_Prob"]
    derived = HFModel(str(TARGET)).derive(transforms.parse("quantize:nf4"))
    run = json.loads((tmp_path / "out" / "attacks" / "quantize_nf4" / "run.json").read_text())
    assert run["provenance"]["models"]["model"] == derived.fingerprint()


def test_each_parameter_is_in_the_fingerprint():
    parent = HFModel(str(TARGET))
    specs = ["quantize:nf4", "quantize:fp4", "quantize:int8-weight", "quantize:nf4,blocksize=128",
             "quantize:nf4,double_quant=true", "quantize:nf4,compute_dtype=bf16"]
    fps = {parent.derive(transforms.parse(s)).fingerprint() for s in specs}
    assert len(fps) == len(specs) and parent.fingerprint() not in fps
    assert parent.derive(transforms.parse("quantize")).fingerprint() == \
        parent.derive(transforms.parse("quantize:method=nf4,blocksize=64")).fingerprint()


@pytest.mark.parametrize("spec, line", [
    ("quantize:blocksze=128", "--attack quantize:blocksze=128: quantize has no parameter 'blocksze'; did you mean "
                              "blocksize? its parameters: method, blocksize, double_quant, compute_dtype, load"),
    ("quantize:nf5", "--attack quantize:nf5: quantize's method=nf5: Input should be 'nf4', 'fp4' or 'int8-weight'"),
    ("quantize:int8-weight,blocksize=64", "--attack quantize:int8-weight,blocksize=64: quantize: int8-weight is "
                                          "row-wise: it takes no blocksize or double_quant"),
    ("quantise:nf4", "--attack quantise:nf4: unknown model attack 'quantise'; did you mean quantize? known: "),
])
def test_bad_quantize_specs_are_one_line(tmp_path, spec, line):
    proc = _tofu(tmp_path, "out", "--attack", spec)
    assert proc.returncode == 2 and proc.stderr.startswith("evaldag: error: " + line), proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


def test_bitsandbytes_missing_is_one_line_naming_the_extra_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    proc = _tofu(tmp_path, "out", "--attack", "quantize:nf4")
    assert proc.returncode == 2
    assert proc.stderr == ("evaldag: error: --attack quantize:nf4: needs bitsandbytes (the evaldag[quantize] extra): "
                           "pip install 'evaldag[quantize]'\n")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_an_adapter_is_merged_into_a_private_base_then_quantized(tmp_path):
    """``--model ADAPTER_DIR --attack quantize:nf4``: the numbers of the attack on the merged
    checkpoint; the process's shared base (the plain run's) is not changed."""
    pytest.importorskip("peft")
    from .test_adapters_peft import _merged, make_adapter

    adapter = make_adapter(tmp_path / "lora", seed=1, tokenizer=True)
    merged = _merged(adapter, tmp_path / "merged")
    assert _tofu(tmp_path, "a", "--attack", "quantize:nf4", model=str(adapter)).returncode == 0
    assert _tofu(tmp_path, "m", "--attack", "quantize:nf4", model=str(merged)).returncode == 0
    read = lambda f: json.loads(f.read_text())  # noqa: E731
    assert read(tmp_path / "a" / "attacks" / "quantize_nf4" / "TOFU_EVAL.json") == \
        read(tmp_path / "m" / "attacks" / "quantize_nf4" / "TOFU_EVAL.json")
    assert _tofu(tmp_path, "a2", model=str(adapter)).returncode == 0  # the shared base again, unquantized
    assert read(tmp_path / "a2" / "TOFU_EVAL.json") == read(tmp_path / "a" / "TOFU_EVAL.json")


@pytest.mark.parametrize("method", ["nf4", "fp4"])
def test_load_bnb_is_transformers_load_in_4bit_bit_for_bit(method):
    """``load=bnb``: bitsandbytes' own Linear4bit and kernels (its fused bf16 kernel on this CPU):
    the logits of transformers' ``load_in_4bit`` model exactly, not the round trip's."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    ref = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32, device_map="cpu", quantization_config=(
        BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=method, bnb_4bit_compute_dtype=torch.float32))).eval()
    derived = HFModel(str(TARGET), dtype="fp32").derive(transforms.parse(f"quantize:{method},load=bnb"))
    model = derived.load().model
    assert type(model.model.layers[1].mlp.down_proj).__name__ == "Linear4bit" and type(model.lm_head) is torch.nn.Linear
    ids = derived.encoder().tokenizer(["Question: Who wrote it?\nAnswer: Jane Doe, in 1999."], return_tensors="pt")["input_ids"]
    roundtrip = transforms.parse(f"quantize:{method}").apply(_load(), None)
    with torch.no_grad():
        kernel, ours, rt = ref(ids).logits, model(ids).logits, roundtrip(ids).logits
    assert torch.equal(ours, kernel)
    assert derived.fingerprint() != HFModel(str(TARGET), dtype="fp32").derive(transforms.parse(f"quantize:{method}")).fingerprint()
    if F.has_avx512bf16():  # this machine: the fused kernel computes in bf16, the round trip in fp32
        assert 0 < (kernel - rt).abs().max().item() < 0.5


def test_load_bnb_refuses_gradient_metrics_before_any_work(tmp_path):
    proc = run_cli(["run", "tofu", "--model", TARGET, "--data", FIX / "tofu_tiny", "--limit", "4", "--quiet",
                    "--metrics", "forget_Q_A_Prob,mia_gradnorm", "--out", tmp_path / "out", "--cache-dir", tmp_path / "c",
                    "--attack", "quantize:nf4,load=bnb"])
    assert proc.returncode == 2 and proc.stderr.startswith("evaldag: error: grad_norms needs gradients; hf:") \
        and "[quantize:nf4,load=bnb] gives token statistics" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_compute_dtype_rounds_the_dequantized_weight_as_bitsandbytes_matmul_casts_it():
    w = _load().model.layers[0].mlp.down_proj.weight.detach()
    got = transforms.parse("quantize:nf4,compute_dtype=bf16").round_trip(w)
    assert got.dtype == torch.float32
    assert torch.equal(got, _bnb_round_trip(w, "quantize:nf4").to(torch.bfloat16).to(torch.float32))
    assert not torch.equal(got, _bnb_round_trip(w, "quantize:nf4"))


def test_a_warm_rerun_of_an_attack_loads_no_weights_and_imports_no_torch(tmp_path):
    import subprocess

    args = ["run", "tofu", "--model", str(TARGET), "--data", str(FIX / "tofu_tiny"), "--limit", "2", "--metrics",
            "forget_Q_A_Prob", "--quiet", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
            "--attack", "quantize:nf4"]
    assert run_cli(args).returncode == 0
    code = ("import sys\nfrom evaldag.engine import cli\n"
            f"code = cli.main({args!r})\n"
            "print(code, *(m in sys.modules for m in ('torch', 'transformers', 'bitsandbytes')))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1",
                         "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert got.stdout.split() == ["0", "False", "False", "False"], got.stderr
    run = json.loads((tmp_path / "out" / "attacks" / "quantize_nf4" / "run.json").read_text())
    assert {n["status"] for n in run["nodes"].values()} == {"cached"}
