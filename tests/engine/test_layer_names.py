"""The layer-name table on GPT-2, GPT-NeoX, Qwen2 and Llama: weight deltas and causal-trace cells on tiny random models."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPTNeoXConfig, LlamaConfig, Qwen2Config

from evaldag.engine import run
from evaldag.engine.adapters import HFModel
from evaldag.metrics.editing.causal_trace import causal_trace
from evaldag.metrics.editing.weight_delta_norm import weight_delta_norm

from ..editing_reference import rome_trace

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "benchmarks" / "demo" / "assets" / "tokenizer"
EDITS = [{"prompt": "Ziopous Mofun was born in ", "subject": "Ziopous Mofun", "target_true": "Poznan", "target_new": "Lisbon"}]

# written out here, independently of evaldag's table: (config, embedding, block, MLP, attention, down-projection weight)
ARCHS = {
    "gpt2": (lambda v: GPT2Config(vocab_size=v, n_embd=32, n_head=4, n_layer=3, n_positions=64, initializer_range=0.3),
             "transformer.wte", "transformer.h.{}", "transformer.h.{}.mlp", "transformer.h.{}.attn", "transformer.h.{}.mlp.c_proj.weight"),
    "gpt_neox": (lambda v: GPTNeoXConfig(vocab_size=v, hidden_size=32, num_attention_heads=4, num_hidden_layers=3,
                                         intermediate_size=64, max_position_embeddings=64, initializer_range=0.3),
                 "gpt_neox.embed_in", "gpt_neox.layers.{}", "gpt_neox.layers.{}.mlp", "gpt_neox.layers.{}.attention",
                 "gpt_neox.layers.{}.mlp.dense_4h_to_h.weight"),
    "qwen2": (lambda v: Qwen2Config(vocab_size=v, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=3,
                                    intermediate_size=64, max_position_embeddings=64, initializer_range=0.3),
              "model.embed_tokens", "model.layers.{}", "model.layers.{}.mlp", "model.layers.{}.self_attn", "model.layers.{}.mlp.down_proj.weight"),
    "llama": (lambda v: LlamaConfig(vocab_size=v, hidden_size=32, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=3,
                                    intermediate_size=64, max_position_embeddings=64, initializer_range=0.3),
              "model.embed_tokens", "model.layers.{}", "model.layers.{}.mlp", "model.layers.{}.self_attn", "model.layers.{}.mlp.down_proj.weight"),
}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def pair(request, tmp_path_factory):
    """(arch, original dir, edited dir): a tiny random model and a copy with layer 1's down-projection changed."""
    arch = request.param
    make, *_names, down = ARCHS[arch]
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(make(len(tok))).eval()
    root = tmp_path_factory.mktemp(arch)
    base, edited = root / "base", root / "edited"
    model.save_pretrained(base)
    tok.save_pretrained(base)
    shutil.copytree(base, edited)
    sd = load_file(str(edited / "model.safetensors"))
    sd[down.format(1)] = sd[down.format(1)] + 0.01 * torch.arange(sd[down.format(1)].numel()).reshape(sd[down.format(1)].shape) / 100
    save_file(sd, str(edited / "model.safetensors"), metadata={"format": "pt"})
    return arch, base, edited


def test_weight_delta_norm_finds_the_down_projection(pair, cache_dir):
    arch, base, edited = pair
    down = ARCHS[arch][-1].format(1)
    want = float(torch.linalg.matrix_norm(load_file(str(base / "model.safetensors"))[down] - load_file(str(edited / "model.safetensors"))[down]))
    res = run([weight_delta_norm(name="n")], {"model": HFModel(edited), "base_model": HFModel(base)}, cache_dir=str(cache_dir))
    assert res.ok, [r.error for r in res.failures()]
    assert res["n"].value_by_index == {"1": pytest.approx(want, rel=1e-6)}


@pytest.mark.parametrize("restore", ["hidden", "mlp", "attn"])
def test_trace_cells_equal_the_hand_loop(pair, cache_dir, restore):
    arch, base, _ = pair
    _make, embed, block, mlp, attn, _down = ARCHS[arch]
    node = causal_trace(name="t", restore=restore, window=2, noise=1.0, samples=3, seed=5)
    res = run([node], {"base_model": HFModel(base), "edits": EDITS}, cache_dir=str(cache_dir))
    assert res.ok, [r.error for r in res.failures()]
    got = res["t"].value_by_index["0"]
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base).eval()
    names = {"embed": embed, "hidden": block, "mlp": mlp, "attn": attn}
    grid, low, high, answer = rome_trace(model, tok(EDITS[0]["prompt"]).input_ids, tuple(got["subject"]), 1.0, 3, 5,
                                         restore, 2, names=names)
    assert got["answer_id"] == answer
    assert got["low"] == pytest.approx(low, abs=1e-5) and got["high"] == pytest.approx(high, abs=1e-5)
    np.testing.assert_allclose(np.array(got["scores"]), grid, atol=2e-5)
    assert np.ptp(grid) > 1e-4  # the restores change something: the cells are not all the baseline
