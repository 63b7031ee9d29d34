"""LoRA/PEFT adapters (issue 31 item 1): fingerprint = base + adapter files, the CLI's
``--model ADAPTER_DIR`` / ``--adapter-base``, one base loaded once in a sweep, numbers equal
to the merged adapter evaluated as a plain checkpoint.

Adapters are made here by peft on the tiny fixture checkpoint, with non-zero B matrices
(``init_lora_weights=False``) so each one really moves the logits.
"""

from __future__ import annotations

import json
import os
import shutil
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
    from evaldag.engine.adapters.hf_peft import HFPeftModel

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


def test_a_changed_lora_alpha_recomputes_instead_of_serving_the_old_numbers(adapters, tmp_path):
    """The reported bug: lora_alpha 8 -> 32 moved the logits but kept the fingerprint, so the
    cache served the old adapter's numbers."""
    cache = tmp_path / "cache"
    assert cli.main([*ARGS, "--model", str(adapters["a"]), "--out", str(tmp_path / "o8"), "--cache-dir", str(cache)]) == 0
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
