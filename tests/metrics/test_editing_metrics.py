"""Editing metrics equal direct computations: HF's perplexity recipe, ROME's efficacy, lm-debugger's dataset score."""

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from evaldag.engine import run
from evaldag.engine.adapters import HFModel
from evaldag.metrics.editing.efficacy import efficacy, efficacy_dataset
from evaldag.metrics.editing.perplexity import perplexity, perplexity_change, windows
from evaldag.metrics.editing.prompts import subject_range

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "benchmarks" / "demo" / "assets" / "models" / "target"
OTHER = ROOT / "benchmarks" / "demo" / "assets" / "models" / "unlearned"
Q = "Question: Where was the author Ziopous Mofun born?\nAnswer: Ziopous Mofun was born in "
EDITS = [
    {"prompt": Q, "subject": "Ziopous Mofun", "target_true": "Poznan", "target_new": "Lisbon",
     "paraphrase_prompts": ["Question: In which city was the writer Ziopous Mofun born?\nAnswer: The birthplace of Ziopous Mofun is the city of ",
                            "Ziopous Mofun was born in "],
     "neighborhood_prompts": ["Question: What genre is Ziopous Mofun known for?\nAnswer: Ziopous Mofun is known for "]},
    {"prompt": "Question: What genre is Ziopous Mofun known for?\nAnswer: Ziopous Mofun is known for ", "subject": "Ziopous Mofun",
     "target_true": "travel writing", "target_new": "science fiction"},
]
TEXTS = [{"text": "Ziopous Mofun was born in Poznan."}, {"text": "Ziopous Mofun is known for travel writing."},
         {"text": "The capital of Japan is Tokyo, and the largest ocean on Earth is the Pacific Ocean."}]


@pytest.fixture(scope="module")
def hf():
    tok = AutoTokenizer.from_pretrained(BASE)
    return tok, AutoModelForCausalLM.from_pretrained(BASE).eval(), AutoModelForCausalLM.from_pretrained(OTHER).eval()


def hf_perplexity(model, tok, text, max_length, stride):
    """HF's "Perplexity of fixed-length models" loop, written out."""
    encodings = tok(text, return_tensors="pt")
    seq_len = encodings.input_ids.size(1)
    nll_sum, n_tokens, prev_end_loc = 0.0, 0, 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc
        input_ids = encodings.input_ids[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            neg_log_likelihood = model(input_ids, labels=target_ids).loss
        num_loss_tokens = (target_ids != -100).sum().item() - target_ids.size(0)
        nll_sum += neg_log_likelihood * num_loss_tokens
        n_tokens += num_loss_tokens
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return float(torch.exp(nll_sum / n_tokens))


@pytest.mark.parametrize("max_length,stride", [(16, 8), (16, 16), (12, 5), (1024, 512)])
def test_perplexity_equals_hf_recipe(hf, cache_dir, max_length, stride):
    tok, base, other = hf
    res = run([perplexity(name="ppl", max_length=max_length, stride=stride),
               perplexity_change(name="change", max_length=max_length, stride=stride)],
              {"model": HFModel(OTHER), "base_model": HFModel(BASE), "texts": TEXTS}, cache_dir=str(cache_dir))
    assert res.ok, res.failures()
    joined = "\n\n".join(t["text"] for t in TEXTS)
    want_edited, want_base = hf_perplexity(other, tok, joined, max_length, stride), hf_perplexity(base, tok, joined, max_length, stride)
    assert res["ppl"].agg_value == pytest.approx(want_edited, rel=1e-5)
    change = res["change"]
    assert change.extra["base"] == pytest.approx(want_base, rel=1e-5)
    assert change.agg_value == pytest.approx(want_edited - want_base, rel=1e-4, abs=1e-5)


def test_windows_follow_hf_loop():
    ids = tuple(range(20))
    w = windows(ids, 8, 5)
    # begin 0: all 8 scored after the first; begin 5: window 5..12, scores 8..12; begin 10: 10..17 scores 13..17; 15: 15..19
    assert [(c[0], len(c), t, weight) for c, t, weight in w] == [
        (0, 1, tuple(range(1, 8)), 7), (5, 3, tuple(range(8, 13)), 4), (10, 3, tuple(range(13, 18)), 4), (15, 3, (18, 19), 1)]


def _mean_logprob(model, tok, prompt, target):
    ctx = tok(prompt).input_ids
    tgt = tok(target, add_special_tokens=False).input_ids
    ids = torch.tensor([ctx + tgt])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return float(np.mean([logp[len(ctx) - 1 + j, t].item() for j, t in enumerate(tgt)]))


def test_efficacy_generalisation_specificity_match_direct_computation(hf, cache_dir):
    tok, base, other = hf
    nodes = [efficacy(name="rewrite"), efficacy(name="para", prompts="paraphrase"), efficacy(name="neigh", prompts="neighborhood"),
             efficacy(name="rewrite_base", bind={"model": "base_model"})]
    res = run(nodes, {"model": HFModel(OTHER), "base_model": HFModel(BASE), "edits": EDITS}, cache_dir=str(cache_dir))
    assert res.ok, res.failures()

    def share(model, which, keep_old=False):
        per_edit = []
        for e in EDITS:
            prompts = [e["prompt"]] if which == "rewrite" else e.get(f"{which}_prompts", [])
            if not prompts:
                continue
            ok = []
            for p in prompts:
                new, true = _mean_logprob(model, tok, p, e["target_new"]), _mean_logprob(model, tok, p, e["target_true"])
                ok.append(true > new if keep_old else new > true)
            per_edit.append(np.mean(ok))
        return float(np.mean(per_edit))

    assert res["rewrite"].agg_value == pytest.approx(share(other, "rewrite"))
    assert res["para"].agg_value == pytest.approx(share(other, "paraphrase"))
    assert res["neigh"].agg_value == pytest.approx(share(other, "neighborhood", keep_old=True))
    assert res["rewrite_base"].agg_value == pytest.approx(share(base, "rewrite"))
    # the base model knows both facts: no edit holds on it
    assert res["rewrite_base"].agg_value == 0.0
    assert res["rewrite"].value_by_index["0"]["new"][0] == pytest.approx(_mean_logprob(other, tok, Q, "Lisbon"), abs=1e-5)
    assert list(res["para"].value_by_index) == ["0"]  # the second edit has no paraphrases


def test_efficacy_dataset_is_lm_debuggers_score(hf, cache_dir):
    tok, base, other = hf
    res = run([efficacy_dataset(name="ds")], {"model": HFModel(OTHER), "base_model": HFModel(BASE), "edits": EDITS},
              cache_dir=str(cache_dir))
    assert res.ok, res.failures()
    wins = []
    for e in EDITS:
        ids = torch.tensor([tok(e["prompt"]).input_ids])
        with torch.no_grad():
            true = int(base(ids).logits[0, -1].argmax())
            logits = other(ids).logits[0, -1]
        target = tok(e["target_new"], add_special_tokens=False).input_ids[0]
        wins.append(bool(logits[target] > logits[true]))
    assert res["ds"].value_by_index == {str(i): w for i, w in enumerate(wins)}
    assert res["ds"].agg_value == pytest.approx(np.mean(wins))
    assert res["ds"].extra["true_tokens"][0] == tok("Poznan", add_special_tokens=False).input_ids[0]


def test_subject_range_first_and_last_and_missing(hf):
    tok = hf[0]
    from evaldag.engine.adapters.hf.hf_encoder import HFEncoder

    enc = HFEncoder(tok)
    ids = tok(Q).input_ids
    first, last = subject_range(enc, ids, "Ziopous Mofun"), subject_range(enc, ids, "Ziopous Mofun", occurrence="last")
    assert tok.decode(ids[first[0]:first[1]]).strip() == "Ziopous Mofun"
    assert tok.decode(ids[last[0]:last[1]]).strip() == "Ziopous Mofun"
    assert first[0] < last[0]
    with pytest.raises(ValueError, match="subject 'Nobody' is not in the prompt"):
        subject_range(enc, ids, "Nobody")
