"""The shipped trace model (``benchmarks/editing/assets/tracer``): rebuilt from its builder,
storing its facts, and showing ROME's early site, the subject's last token in the
middle layers, in the MLP trace, with a fine-tuning edit on top giving every metric signal.

The trace is checked twice: through evaldag's batched ``causal_trace`` and, for one edit,
against ROME's hand loop (tests/editing_reference.py), since this is the one shipped model
whose blocks mix sliding-window and full attention.
"""

import hashlib
import json

import numpy as np
import pytest
from safetensors import safe_open

from evaldag.benchmarks.editing import spec
from evaldag.benchmarks.editing.config import ALL_METRICS, EditingConfig
from evaldag.benchmarks.editing.make_edit import make_edited_checkpoint
from evaldag.engine import run

from ..asset_builders.editing import make_tracer
from ..editing_reference import rome_trace

TRACER = make_tracer.TRACER
MANIFEST = json.loads((TRACER / "manifest.json").read_text())
EDITS = json.loads((TRACER / "edits.json").read_text())
MIDDLE = (2, 3)  # the blocks with an MLP


def test_manifest_lists_every_file():
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(TRACER.iterdir())
             if p.is_file() and p.name != "manifest.json"}
    assert files == MANIFEST["files"]
    assert MANIFEST["fit"]["p_answer_min"] > 0.95


def test_data_and_tokenizer_rebuild_identically():
    from tokenizers import Tokenizer

    rows = make_tracer.facts()
    for name, obj in (("facts.json", rows), ("edits.json", make_tracer.edits(rows)), ("texts.json", make_tracer.texts(rows)),
                      ("corpus.json", make_tracer.corpus(rows))):
        assert json.loads((TRACER / name).read_text()) == obj, name
    raw = make_tracer._tokenizer([c + a for c, a in make_tracer.examples(rows)])
    assert raw.to_str() == Tokenizer.from_file(str(TRACER / "tokenizer.json")).to_str()
    # every edit is about a stored fact, one of the first eight people, and none of the texts
    assert [e["subject"] for e in EDITS] == [r["subject"] for r in rows[:8]]
    texts = [t["text"] for t in make_tracer.texts(rows)]
    assert len(texts) == 52 * 4 and not any(e["subject"] in t for e in EDITS for t in texts)
    # ROME's corpus (cards, and the second template of the people no edit touches): no metric scores it
    corpus = [t["text"] for t in make_tracer.corpus(rows)]
    assert len(corpus) == 60 * 4 + 52 * 4 and not set(corpus) & set(texts)
    scored = [e["prompt"] for e in EDITS] + [q for e in EDITS for q in e["paraphrase_prompts"]]
    scored += [n["prompt"] for e in EDITS for n in e["neighborhood_prompts"]]
    assert not any(t.startswith(q) for q in scored for t in corpus)


def test_architecture_is_shaped_as_documented():
    config = json.loads((TRACER / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["num_hidden_layers"] == 6
    assert config["layer_types"] == ["sliding_attention"] * 4 + ["full_attention"] * 2 and config["sliding_window"] == 2
    with safe_open(str(TRACER / "model.safetensors"), "pt") as f:
        for layer in range(6):
            down = f.get_tensor(f"model.layers.{layer}.mlp.down_proj.weight")
            assert (float(down.abs().max()) == 0.0) == (layer not in MIDDLE), layer


def test_builder_runs_end_to_end_on_a_short_fit(tmp_path, monkeypatch):
    """The whole builder in one epoch: the loaded-tokenizer check passes, the MLP-less blocks stay zero."""
    from ..asset_builders.demo.training import deterministic_torch

    monkeypatch.setitem(make_tracer.TRAIN, "epochs", 1)
    with deterministic_torch():
        stats = make_tracer.train(tmp_path, log=lambda _msg: None)
    assert 0 <= stats["p_answer_min"] <= stats["p_answer_mean"] <= 1
    assert set(json.loads((tmp_path / "manifest.json").read_text())["files"]) == set(MANIFEST["files"])
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert float(f.get_tensor("model.layers.4.mlp.down_proj.weight").abs().max()) == 0.0
        assert float(f.get_tensor("model.layers.2.mlp.down_proj.weight").abs().max()) > 0.0


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = EditingConfig(model=str(TRACER), base_model=str(TRACER), edits=str(TRACER / "edits.json"),
                        metrics=("causal_trace", "causal_trace_mlp", "causal_trace_attn"), trace_window=2)
    res = run(spec.nodes(cfg), spec.resources(cfg), cache_dir=str(cache))
    assert res.ok, [r.error for r in res.failures()]
    out = res.results("EDITING")
    return out["causal_trace_mlp"], out["causal_trace"], out["causal_trace_attn"]


def test_mlp_trace_peaks_at_the_subjects_last_token_in_the_middle_layers(traces):
    mlp, hidden, attn = traces
    for k, v in mlp.value_by_index.items():
        grid, sub, last = np.array(v["scores"]), v["subject_last"], v["last"]
        assert v["tokens"][sub["position"]].strip() == EDITS[int(k)]["subject"].split()[1]  # the surname
        assert v["high"] > 0.95 and v["low"] < v["high"] - 0.25
        assert sub["best_layer"] in MIDDLE and sub["effect"] > 0.3, (k, sub)
        assert last["effect"] < 1e-4  # the last token's MLPs see only the previous token: nothing to restore
        assert tuple(v["peak"]) == (sub["position"], sub["best_layer"])  # the grid's peak
        assert grid.max() == pytest.approx(v["peak_score"])
        # the hidden-state trace: restoring the surname's state before block 4 brings the answer back
        h = hidden.value_by_index[k]
        assert h["subject_last"]["best_layer"] < 4 and h["subject_last"]["effect"] > 0.3
        assert max(h["scores"][-1][:4]) == pytest.approx(h["low"], abs=1e-4)  # the last token: nothing before block 4
        # the attention trace: the last token's attention in blocks 4-5 moves the attribute out
        a = attn.value_by_index[k]
        assert a["last"]["best_layer"] in (4, 5) and a["last"]["effect"] > 0.3
    assert mlp.agg_value > 0.45


def test_trace_on_sliding_window_blocks_equals_rome_hand_loop(traces):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    mlp = traces[0]
    tok = AutoTokenizer.from_pretrained(str(TRACER))
    model = AutoModelForCausalLM.from_pretrained(str(TRACER), dtype=torch.float32).eval()
    got = mlp.value_by_index["1"]
    ids = tok(EDITS[1]["prompt"])["input_ids"]
    noise = mlp.extra["noise"]
    want, low, high, answer = rome_trace(model, ids, tuple(got["subject"]), noise, 10, 1, "mlp", 2)
    assert got["answer_id"] == answer
    assert got["low"] == pytest.approx(low, abs=1e-5) and got["high"] == pytest.approx(high, abs=1e-6)
    np.testing.assert_allclose(np.array(got["scores"]), want, atol=2e-5)


def test_an_edit_of_the_middle_layer_shows_every_signal(tmp_path):
    edited = tmp_path / "edited"
    probs = make_edited_checkpoint(TRACER, edited, EDITS, layer=2)
    assert min(probs) > 0.5
    cfg = EditingConfig(model=str(edited), base_model=str(TRACER), edits=str(TRACER / "edits.json"),
                        texts=str(TRACER / "texts.json"), ppl_per_text=True,
                        metrics=tuple(m for m in ALL_METRICS if not m.startswith(("causal", "rome_"))))  # rome_*: need a corpus
    res = run(spec.nodes(cfg), spec.resources(cfg), cache_dir=str(tmp_path / "cache"))
    assert res.ok, [r.error for r in res.failures()]
    out = res.results("EDITING")
    assert list(out["weight_delta_norm"].value_by_index) == ["2"] and out["weight_delta_norm"].agg_value > 0
    assert out["efficacy_base"].agg_value == 0.0 and out["efficacy"].agg_value == 1.0
    assert out["generalization_base"].agg_value == 0.0 and out["generalization"].agg_value > 0.5
    assert out["specificity_base"].agg_value == 1.0 and out["specificity"].agg_value < 1.0  # fine-tuning hurts neighbours
    assert out["perplexity"].agg_value > out["perplexity_base"].agg_value
