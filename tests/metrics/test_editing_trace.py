"""causal_trace equals ROME's trace_with_patch written out as a hand loop over layers and positions."""

from pathlib import Path

import numpy as np
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from evaldag.engine import run
from evaldag.engine.adapters import HFModel
from evaldag.metrics.editing.trace_backend import CausalTrace
from evaldag.metrics.editing.causal_trace import causal_trace

from ..editing_reference import rome_trace

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "benchmarks" / "demo" / "assets" / "models" / "target"
Q = "Question: Where was the author Ziopous Mofun born?\nAnswer: Ziopous Mofun was born in "
EDITS = [{"prompt": Q, "subject": "Ziopous Mofun", "target_true": "Poznan", "target_new": "Lisbon"}]


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
    # ROME's two sites are rows of the grid: the subject's last token and the last token
    for site, pos in (("subject_last", subject[1] - 1), ("last", len(ids) - 1)):
        assert got[site]["position"] == pos and got[site]["best_layer"] == int(np.argmax(want[pos]))
        assert got[site]["effect"] == pytest.approx(want[pos].max() - low, abs=3e-5)
        assert got[site]["depth"] == got[site]["best_layer"] / (want.shape[1] - 1)
    extra = res["trace"].extra
    assert extra["subject_last_effect"] == got["subject_last"]["effect"] and extra["last_depth"] == got["last"]["depth"]
    if restore == "hidden":  # the last token's final state restored is the clean run: that cell is "high"
        assert got["scores"][-1][-1] == pytest.approx(high, abs=1e-6)
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
