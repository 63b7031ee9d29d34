"""causal_trace equals ROME's trace_with_patch written out as a hand loop over layers and positions."""

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from evaldag.engine import run
from evaldag.engine.adapters import HFModel
from evaldag.engine.requests import CausalTrace
from evaldag.metrics.editing.causal_trace import causal_trace

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "benchmarks" / "demo" / "assets" / "models" / "target"
Q = "Question: Where was the author Ziopous Mofun born?\nAnswer: Ziopous Mofun was born in "
EDITS = [{"prompt": Q, "subject": "Ziopous Mofun", "target_true": "Poznan", "target_new": "Lisbon"}]


def rome_trace(model, ids, subject, noise, samples, seed, kind, window, answer=None):
    """ROME's calculate_hidden_flow / trace_with_patch, one forward of samples+1 rows per cell."""
    n_layers = model.config.num_hidden_layers
    modules = dict(model.named_modules())
    inp = torch.tensor([ids] * (samples + 1))
    a, b = subject
    with torch.no_grad():
        clean = torch.softmax(model(inp[:1]).logits[0, -1], -1)
    answer = int(clean.argmax()) if answer is None else answer

    def patched(states):  # states: list of (module name, position)
        def noise_hook(_m, _i, out):
            out = out.clone()
            draw = np.random.RandomState(seed).randn(out.shape[0] - 1, b - a, out.shape[2])
            out[1:, a:b] += noise * torch.from_numpy(draw).to(out.dtype)
            return out

        def restore_hook(pos):
            def hook(_m, _i, out):
                h = (out[0] if isinstance(out, tuple) else out).clone()
                h[1:, pos] = h[0, pos]
                return (h, *out[1:]) if isinstance(out, tuple) else h
            return hook

        hs = [modules["model.embed_tokens"].register_forward_hook(noise_hook)]
        hs += [modules[name].register_forward_hook(restore_hook(pos)) for name, pos in states]
        try:
            with torch.no_grad():
                probs = torch.softmax(model(inp).logits[1:, -1, :], dim=1).mean(dim=0)[answer]
        finally:
            for h in hs:
                h.remove()
        return float(probs)

    low = patched([])
    grid = np.zeros((len(ids), n_layers))
    for t in range(len(ids)):
        for layer in range(n_layers):
            if kind == "hidden":
                names = [f"model.layers.{layer}"]
            else:
                lo, hi = max(0, layer - window // 2), min(n_layers, layer - (-window // 2))
                names = [f"model.layers.{x}.{'mlp' if kind == 'mlp' else 'self_attn'}" for x in range(lo, hi)]
            grid[t, layer] = patched([(n, t) for n in names])
    return grid, low, float(clean[answer]), answer


@pytest.fixture(scope="module")
def hf():
    return AutoTokenizer.from_pretrained(BASE), AutoModelForCausalLM.from_pretrained(BASE).eval()


@pytest.mark.parametrize("restore,window", [("hidden", 1), ("mlp", 2), ("attn", 1)])
def test_trace_equals_hand_loop(hf, cache_dir, restore, window):
    tok, model = hf
    node = causal_trace(name="trace", restore=restore, window=window, noise=0.5, samples=4, seed=3, occurrence="last")
    res = run([node], {"base_model": HFModel(BASE), "edits": EDITS}, cache_dir=str(cache_dir))
    assert res.ok, res.failures()
    got = res["trace"].value_by_index["0"]
    ids = tok(Q).input_ids
    subject = tuple(got["subject"])
    assert tok.decode(ids[subject[0]:subject[1]]).strip() == "Ziopous Mofun" and subject[0] > 8  # the answer's mention
    want, low, high, answer = rome_trace(model, ids, subject, 0.5, 4, 3, restore, window)
    assert got["answer_id"] == answer and got["answer"] == "Poznan"
    assert got["low"] == pytest.approx(low, abs=1e-5)
    assert got["high"] == pytest.approx(high, abs=1e-6)
    np.testing.assert_allclose(np.array(got["scores"]), want, atol=2e-5)
    assert low < high
    # each (position, layer) cell is its own cached request, served in batches: few forwards per cell
    st = res.executor["by_kind"]["causal_trace"]
    assert st["unique"] == len(ids) * 2 + 1
    assert st["batches"] < st["unique"] / 4


def test_trace_noise_from_embedding_std_and_cache(hf, cache_dir):
    tok, model = hf
    res = run([causal_trace(name="trace", samples=2)], {"base_model": HFModel(BASE), "edits": EDITS}, cache_dir=str(cache_dir))
    assert res.ok, res.failures()
    emb = model.model.embed_tokens.weight[tok("Ziopous Mofun", add_special_tokens=False).input_ids]
    assert res["trace"].extra["noise"] == pytest.approx(3 * float(emb.detach().std()), rel=1e-5)
    # another node (other params) asking for the same cells forwards nothing: each cell is a cached request
    again = run([causal_trace(name="trace2", samples=2, edits=(0,)), causal_trace(name="t3", samples=2, seed=2)],
                {"base_model": HFModel(BASE), "edits": EDITS}, cache_dir=str(cache_dir))
    st = again.executor["by_kind"]["causal_trace"]
    assert st["unique"] == 2 * st["cached"] and st["sequences_forwarded"] == st["cached"]
    assert again["trace2"].value_by_index == res["trace"].value_by_index


def test_bad_trace_requests_are_refused():
    with pytest.raises(ValueError, match="subject range"):
        CausalTrace((1, 2, 3), (2, 5), 0.1)
    with pytest.raises(ValueError, match="layer 5 is out of range"):
        CausalTrace((1, 2, 3), (0, 1), 0.1, layer=5, position=0).restored_layers(2)
