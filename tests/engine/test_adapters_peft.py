"""LoRA/PEFT adapters: fingerprint = base + adapter files, the CLI's
``--model ADAPTER_DIR`` / ``--adapter-base``, one base loaded once in a sweep, numbers equal
to the merged adapter evaluated as a plain checkpoint.

Adapters are made here by peft on the tiny fixture checkpoint, with non-zero B matrices
(``init_lora_weights=False``) so each one really moves the logits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evaldag.engine import cli

FIX = Path(__file__).parents[1] / "fixtures"
BASE = FIX / "tiny-llama" / "target"
ARGS = ["run", "tofu", "--data", str(FIX / "tofu_tiny"), "--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE",
        "--max-new-tokens", "6", "--quiet"]


def _need_peft():
    try:
        import peft  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("peft is not installed in CI (pip install 'evaldag[peft]')", pytrace=False)
        pytest.skip("peft is not installed (pip install 'evaldag[peft]')")


def make_adapter(dest: Path, seed: int, alpha: int = 8, base: str | Path = BASE, tokenizer: bool = False) -> Path:
    """A LoRA adapter of the tiny base, saved by peft; ``base_model_name_or_path`` = ``base``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(BASE))
    cfg = LoraConfig(r=4, lora_alpha=alpha, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, cfg)
    peft_model.save_pretrained(str(dest))
    conf = json.loads((dest / "adapter_config.json").read_text())
    conf["base_model_name_or_path"] = str(base)
    (dest / "adapter_config.json").write_text(json.dumps(conf))
    if tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(BASE / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> dict[str, Path]:
    _need_peft()
    tmp = tmp_path_factory.mktemp("adapters")
    return {"a": make_adapter(tmp / "lora-a", seed=1), "b": make_adapter(tmp / "lora-b", seed=2, tokenizer=True)}


def _merged(adapter: Path, dest: Path) -> Path:
    """The adapter merged into a copy of its base (peft's merge_and_unload), a plain checkpoint."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(BASE)), str(adapter)).merge_and_unload()
    model.save_pretrained(str(dest))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(BASE / name, dest / name)
    return dest


def _values(out: Path) -> dict:
    data = json.loads((out / "TOFU_EVAL.json").read_text())
    return {k: v["value_by_index"] for k, v in data.items() if isinstance(v, dict) and "value_by_index" in v}


# ----------------------------------------------------------------------------- fingerprint


def test_an_adapters_fingerprint_holds_its_base_and_its_config(adapters, tmp_path):
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.adapters.hf.hf_peft import HFPeftModel

    a = HFModel(str(adapters["a"]))
    assert isinstance(a, HFPeftModel) and a.base.path == str(BASE)
    alpha = shutil.copytree(adapters["a"], tmp_path / "alpha32")  # the same weights, lora_alpha 8 -> 32
    conf = json.loads((alpha / "adapter_config.json").read_text())
    assert conf["lora_alpha"] == 8
    conf["lora_alpha"] = 32
    (alpha / "adapter_config.json").write_text(json.dumps(conf))
    assert HFModel(str(alpha)).fingerprint() != a.fingerprint()
    other_base = shutil.copytree(BASE, tmp_path / "base2")  # the same adapter over another base
    nudged = other_base / "generation_config.json"
    nudged.write_text(nudged.read_text().replace("}", ', "temperature": 0.5}', 1))
    assert HFModel(str(adapters["a"]), adapter_base=str(other_base)).fingerprint() != a.fingerprint()
    assert HFModel(str(adapters["a"])).fingerprint() == a.fingerprint()


WARM = ("import json, sys\nfrom evaldag.engine import cli\nassert cli.main(json.loads(sys.argv[1])) == 0\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules)))")


def test_a_changed_lora_alpha_recomputes_instead_of_serving_the_old_numbers(adapters, tmp_path):
    """The reported bug: lora_alpha 8 -> 32 moved the logits but kept the fingerprint, so the
    cache served the old adapter's numbers."""
    cache = tmp_path / "cache"
    assert cli.main([*ARGS, "--model", str(adapters["a"]), "--out", str(tmp_path / "o8"), "--cache-dir", str(cache)]) == 0
    warm = subprocess.run([sys.executable, "-c", WARM, json.dumps([*ARGS, "--model", str(adapters["a"]), "--out",
                                                                     str(tmp_path / "warm"), "--cache-dir", str(cache)])],
                          capture_output=True, text=True, timeout=300)
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout.strip().splitlines()[-1]) == []  # a warm rerun of an adapter: no torch, no peft
    assert _values(tmp_path / "warm") == _values(tmp_path / "o8")
    conf = json.loads((adapters["a"] / "adapter_config.json").read_text())
    alpha = shutil.copytree(adapters["a"], tmp_path / "a32")
    (alpha / "adapter_config.json").write_text(json.dumps({**conf, "lora_alpha": 32}))
    assert cli.main([*ARGS, "--model", str(alpha), "--out", str(tmp_path / "o32"), "--cache-dir", str(cache)]) == 0
    run = json.loads((tmp_path / "o32" / "run.json").read_text())
    assert run["executor"]["sequences_forwarded"] > 0  # recomputed, not served from the lora_alpha=8 entries
    v8, v32 = _values(tmp_path / "o8"), _values(tmp_path / "o32")
    assert v8.keys() == v32.keys() and v8 != v32


def test_only_the_files_a_model_loads_are_hashed(tmp_path):
    """A Trainer checkpoint's training_args.bin / optimizer / RNG state change no number."""
    from evaldag.engine.adapters.hf import HFModel

    ckpt = shutil.copytree(BASE, tmp_path / "checkpoint-10")
    before = HFModel(str(ckpt)).fingerprint()
    (ckpt / "training_args.bin").write_bytes(b"trainer state 1")
    (ckpt / "optimizer.pt").write_bytes(b"adam")
    (ckpt / "rng_state.pth").write_bytes(b"rng")
    assert HFModel(str(ckpt)).fingerprint() == before
    (ckpt / "training_args.bin").write_bytes(b"trainer state 2")
    assert HFModel(str(ckpt)).fingerprint() == before


# ----------------------------------------------------------------------------- the CLI, a sweep


def _model_record(out: Path) -> dict:
    resources = json.loads((out / "run.json").read_text())["provenance"]["resources"]
    return resources["model"]


def test_a_sweep_of_adapters_loads_the_base_once_and_equals_the_merged_checkpoints(adapters, tmp_path):
    from evaldag.engine.adapters.hf import hf_peft

    out, cache = tmp_path / "sweep", tmp_path / "cache"
    hf_peft._BASE.release()  # an earlier test's base (the same one) would otherwise be reused
    loads = hf_peft._BASE.loads
    sweep = [a if a != "forget_Q_A_Prob,forget_Q_A_ROUGE" else a + ",mia_gradnorm" for a in ARGS]
    assert cli.main([*sweep, "--model", str(adapters["a"]), "--model", str(adapters["b"]), "--out", str(out),
                     "--cache-dir", str(cache)]) == 0
    assert hf_peft._BASE.loads == loads + 1  # one base for both adapters, switched with set_adapter
    base = hf_peft._BASE.peft
    assert base is not None and not any("merged" in n for n, _ in base.named_modules())  # adapters kept apart
    record = _model_record(out / "lora-a")
    assert record["source"] == "adapter" and record["adapter"] == str(adapters["a"].resolve())
    assert record["base"]["path"] == str(BASE.resolve()) and record["peft_type"] == "LORA"

    for name in ("a", "b"):  # each adapter's numbers = its merged checkpoint evaluated as a plain one
        merged = _merged(adapters[name], tmp_path / f"merged-{name}")
        alone = tmp_path / f"alone-{name}"
        assert cli.main([*sweep, "--model", str(merged), "--out", str(alone), "--cache-dir", str(tmp_path / "c2")]) == 0
        got, want = _values(out / f"lora-{name}"), _values(alone)
        prob = "forget_Q_A_Prob"
        assert got[prob].keys() == want[prob].keys() and len(got[prob]) > 3
        worst = max(abs(got[prob][k]["prob"] - want[prob][k]["prob"]) for k in got[prob])
        print(f"adapter {name} vs its merged checkpoint: max |d prob| {worst:.2e}")
        assert worst < 1e-5, worst
        # per-sample gradient norms too: the base weights take the gradient of the merged ones
        g, w = (json.loads((o / "TOFU_EVAL.json").read_text())["mia_gradnorm"]["forget"]["value_by_index"]
                for o in (out / f"lora-{name}", alone))
        assert g.keys() == w.keys() and all(g[k]["score"] == pytest.approx(w[k]["score"], rel=1e-4) for k in g)
    assert _values(out / "lora-a") != _values(out / "lora-b")


def _error(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("evaldag: error: ") and "Traceback" not in err, err
    return err


def test_bad_adapters_are_one_line_each_and_write_nothing(adapters, tmp_path, capsys):
    from evaldag.engine.adapters.hf import HFModel

    out = tmp_path / "out"
    run = [*ARGS, "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    # a base that is neither a folder nor in the hub cache, offline: named, with the way out
    lost = shutil.copytree(adapters["a"], tmp_path / "lost-base")
    conf = json.loads((lost / "adapter_config.json").read_text())
    (lost / "adapter_config.json").write_text(json.dumps({**conf, "base_model_name_or_path": "nobody/no-such-base"}))
    err = _error([*run, "--model", str(lost)], capsys)
    assert f"--model {lost}: the base model 'nobody/no-such-base' (base_model_name_or_path in adapter_config.json)" in err
    assert "--model-arg adapter_base=DIR" in err
    # --adapter-base: a local copy of the base, the same fingerprint as the configured base
    assert HFModel(str(lost), adapter_base=str(BASE)).fingerprint() == HFModel(str(adapters["a"])).fingerprint()
    err = _error([*run, "--model", str(lost), "--adapter-base", str(tmp_path / "nowhere")], capsys)
    assert err == f"evaldag: error: --model-arg adapter_base={tmp_path / 'nowhere'}: no such folder"
    err = _error([*run, "--model", str(BASE), "--adapter-base", str(BASE)], capsys)  # not an adapter
    assert err == (f"evaldag: error: --model-arg adapter_base={BASE}: --model {BASE} is not an adapter folder "
                   "(no adapter_config.json)")
    err = _error([*run, "--model", str(adapters["a"]), "--tokenizer", str(BASE)], capsys)
    assert f"an adapter takes its tokenizer from its own folder or its base's, not --model-arg tokenizer={BASE}" in err
    # no tokenizer in the adapter nor in its base (the first-hour refusal, for adapters)
    bare = tmp_path / "bare-base"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(BASE / name, bare / name)
    err = _error([*run, "--model", str(adapters["a"]), "--adapter-base", str(bare)], capsys)
    assert err == f"evaldag: error: --model {adapters['a']}: no tokenizer in the adapter's folder nor in its base {bare}"
    (tmp_path / "empty").mkdir()
    err = _error([*run, "--model", str(adapters["a"]), "--adapter-base", str(tmp_path / "empty")], capsys)
    assert "no config.json there" in err and str(adapters["a"]) in err
    assert not out.exists()


def test_without_peft_or_with_a_broken_config_an_adapter_is_one_line(adapters, tmp_path, capsys, monkeypatch):
    run = [*ARGS, "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    broken = shutil.copytree(adapters["a"], tmp_path / "broken")
    (broken / "adapter_config.json").write_text("{not json")
    err = _error([*run, "--model", str(broken)], capsys)
    assert err.startswith(f"evaldag: error: {broken / 'adapter_config.json'}: cannot be read as JSON"), err
    monkeypatch.setitem(__import__("sys").modules, "peft", None)  # `import peft` now fails as if not installed
    err = _error([*run, "--model", str(adapters["a"])], capsys)
    assert err == (f"evaldag: error: --model {adapters['a']} is a PEFT adapter (adapter_config.json); loading it "
                   "needs peft: pip install 'evaldag[peft]'")
    assert not (tmp_path / "out").exists()


def test_an_adapter_of_a_base_with_another_hidden_size_is_one_line_before_loading(tmp_path):
    """An adapter trained on another base (hidden size 32) pointed at the fixture base (64): its
    lora_A/lora_B shapes are checked against the base's config.json before any weight loads."""
    _need_peft()
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    small = LlamaForCausalLM(LlamaConfig(vocab_size=1024, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, head_dim=16))
    adapter = tmp_path / "lora-of-a-32-base"
    get_peft_model(small, LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"],
                                     init_lora_weights=False)).save_pretrained(str(adapter))
    conf = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**conf, "base_model_name_or_path": str(BASE)}))
    out = tmp_path / "out"
    r = subprocess.run([str(Path(sys.executable).with_name("evaldag")), *ARGS, "--model", str(adapter), "--out", str(out),
                        "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]
    assert lines[0] == (f"evaldag: error: --model {adapter}: adapter_model.safetensors does not fit its base {BASE}: "
                        "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight has 32 output features, the "
                        "base's hidden_size is 64 (config.json); the adapter was trained on another base"), lines[0]
    assert not out.exists()


def test_a_run_on_an_adapter_prints_no_third_party_deprecation_notice(adapters, tmp_path):
    """peft calls transformers' deprecated is_gradient_checkpointing: not a line of the user's run."""
    from ..inprocess import run_cli

    r = run_cli([*ARGS, "--model", str(adapters["a"]), "--limit", "2", "--out", str(tmp_path / "o"),
                 "--cache-dir", str(tmp_path / "c")])
    assert r.returncode == 0, r.stderr
    assert "FutureWarning" not in r.stderr and "is_gradient_checkpointing" not in r.stderr, r.stderr
