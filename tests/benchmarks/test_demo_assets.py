"""The assets behind ``evaldag demo`` (``benchmarks/demo/assets``): regenerable, loadable
offline, and showing the signal the demo is about.

The signal is recomputed here with plain transformers, independently of
``make_assets.py``'s own check: one sequence at a time, ``model(input_ids,
labels=labels).loss`` as open-unlearning's ``avg_loss``, greedy generation and
``rouge_score`` for ROUGE-L recall, ``scipy.stats.ks_2samp`` for forget quality.

Reproducibility contract (docs/demo-assets.md): the data and the tokenizer are rebuilt
byte for byte everywhere; the checkpoints byte for byte on the same CPU model and
library versions as ``manifest.json`` records, and within float tolerance elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from evaldag.benchmarks.demo import ASSETS

from ..asset_builders.demo import authors, make_assets

DATA = ASSETS / "data"
MODELS = ASSETS / "models"
MANIFEST = json.loads((ASSETS / "manifest.json").read_text())
NAMES = ("target", "unlearned", "retain")

# A rebuild on other hardware (emulated here with ATEN_CPU_CAPABILITY=avx2,
# MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2) moved weights by at most 2.6e-5
# (target, retain) and 2.4e-4 (unlearned: gradient ascent amplifies), and the signal by
# at most 1.4e-5. The bounds below leave a 10x margin.
WEIGHT_ATOL = 2e-3
SIGNAL_ATOL = 1e-4


def _read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- (a) data

def test_data_regenerates_byte_for_byte(tmp_path):
    authors.write(tmp_path)
    bundled = sorted(p.name for p in DATA.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == bundled
    assert bundled == sorted([f"{s}.json" for s in authors.SUBSETS] + ["README.md"])
    for name in bundled:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_data_has_tofu_shape():
    rows = {s: _read_jsonl(DATA / f"{s}.json") for s in authors.SUBSETS}
    sizes = {s: len(r) for s, r in rows.items()}
    assert sizes == {"forget10": 20, "retain90": 180, "full": 200, "holdout10": 20,
                     "forget10_perturbed": 20, "retain_perturbed": 20,
                     "real_authors_perturbed": 22, "world_facts_perturbed": 24}
    for s in ("forget10", "retain90", "full", "holdout10"):
        assert all(list(r) == ["question", "answer"] for r in rows[s]), s
    # forget10 is the tail of full, retain90 the head; holdout authors are never in full.
    assert rows["full"] == rows["retain90"] + rows["forget10"]
    full_q = {r["question"] for r in rows["full"]}
    assert not {r["question"] for r in rows["holdout10"]} & full_q
    for s, base in (("forget10_perturbed", rows["forget10"]), ("retain_perturbed", rows["retain90"])):
        assert [(r["question"], r["answer"]) for r in rows[s]] == [
            (r["question"], r["answer"]) for r in base[: len(rows[s])]]
        for r in rows[s]:
            assert list(r) == list(authors.PERTURBED_KEYS)
            assert len(r["perturbed_answer"]) == 5
            assert len(set(r["perturbed_answer"]) | {r["paraphrased_answer"]}) == 6
    for s in ("real_authors_perturbed", "world_facts_perturbed"):
        for r in rows[s]:
            assert list(r) == list(authors.OPTIONS_KEYS)
            options = [r[f"option{i}"] for i in range(1, 5)]
            assert r["answer"] in options and r["paraphrased_answer"] == r["answer"]
            assert sorted(r["perturbed_answer"]) == sorted(o for o in options if o != r["answer"])
    # the README's front matter names every subset, as the hub's dataset card does
    readme = (DATA / "README.md").read_text()
    assert all(f"- config_name: {s}\n" in readme for s in authors.SUBSETS)


def test_manifest_lists_every_asset():
    files = {p.relative_to(ASSETS).as_posix(): _sha256(p) for p in sorted(ASSETS.rglob("*"))
             if p.is_file() and p.name != "manifest.json"}
    assert files == MANIFEST["files"]


# ---------------------------------------------------------------- (b) tokenizer

def test_tokenizer_retrains_identically():
    tok = make_assets.train_tokenizer(make_assets.tokenizer_texts(authors.build()))
    files = make_assets.tokenizer_files(tok)
    for name, body in files.items():
        assert body == (ASSETS / "tokenizer" / name).read_bytes(), name
        for model in NAMES:
            assert (MODELS / model / name).read_bytes() == body, (model, name)


def test_tokenizer_prompt_is_a_prefix_of_prompt_plus_answer():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ASSETS / "tokenizer"), local_files_only=True)
    assert len(tok) == 1024
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|begin_of_text|>", "<|endoftext|>", "<pad>")
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id}) == 3
    data = authors.build()
    for subset in ("forget10_perturbed", "retain_perturbed", "holdout10"):
        for r in data.subsets[subset]:
            prompt = make_assets.prompt_of(r["question"])
            ids = tok(prompt)["input_ids"]
            assert ids[0] == tok.bos_token_id
            for answer in [r["answer"], r.get("paraphrased_answer", r["answer"]), *r.get("perturbed_answer", [])]:
                assert tok(prompt + answer)["input_ids"][: len(ids)] == ids


# ---------------------------------------------------------------- (c) checkpoints and signal

def _avg_loss(model, tok, question, answer):
    """open-unlearning's avg_loss for one (question, answer), eos included."""
    import torch

    prompt = f"Question: {question}\nAnswer: "
    full = tok(prompt + answer)["input_ids"]
    n_prompt = len(tok(prompt)["input_ids"])
    if full[-1] != tok.eos_token_id:
        full.append(tok.eos_token_id)
    labels = [-100] * n_prompt + full[n_prompt:]
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([full]), labels=torch.tensor([labels])).loss)


def _greedy(model, tok, question):
    import torch

    ids = tok(f"Question: {question}\nAnswer: ", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=200, pad_token_id=tok.eos_token_id)
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).split(tok.eos_token)[0].strip()


@pytest.fixture(scope="module")
def signal():
    import torch
    from rouge_score import rouge_scorer
    from scipy.stats import ks_2samp
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    forget = _read_jsonl(DATA / "forget10_perturbed.json")
    retain = _read_jsonl(DATA / "retain_perturbed.json")
    out = {}
    for name in NAMES:
        tok = AutoTokenizer.from_pretrained(str(MODELS / name), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(MODELS / name), local_files_only=True).eval()
        res = {"config": model.config}
        for split, rows in (("forget", forget), ("retain", retain)):
            prob, tr, rouge = [], [], []
            for r in rows:
                q = r["question"]
                prob.append(math.exp(-_avg_loss(model, tok, q, r["answer"])))
                para = _avg_loss(model, tok, q, r["paraphrased_answer"])
                pert = [_avg_loss(model, tok, q, a) for a in r["perturbed_answer"]]
                tr.append(math.exp(-sum(pert) / len(pert)) / (math.exp(-para) + 1e-10))
                rouge.append(scorer.score(r["answer"], _greedy(model, tok, q))["rougeL"].recall)
            res[f"{split}_Q_A_Prob"] = sum(prob) / len(prob)
            res[f"{split}_Q_A_ROUGE"] = sum(rouge) / len(rouge)
            res[f"{split}_tr"] = tr
        res["forget_truth_ratio"] = sum(min(t, 1 / (t + 1e-10)) for t in res["forget_tr"]) / len(forget)
        out[name] = res
    for name in NAMES:
        out[name]["forget_quality"] = float(ks_2samp(out[name]["forget_tr"], out["retain"]["forget_tr"]).pvalue)
    return out


def test_checkpoints_are_tiny_llamas():
    for name in NAMES:
        config = json.loads((MODELS / name / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLM"]
        assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
                config["intermediate_size"], config["vocab_size"]) == (2, 64, 4, 128, 1024)
        assert config["tie_word_embeddings"] is True
        assert (MODELS / name / "model.safetensors").stat().st_size < 1_000_000


def test_signal_orderings(signal):
    t, u, r = (signal[n] for n in NAMES)
    # forget_Q_A_Prob: target > unlearned > retain, each by a clear margin
    assert t["forget_Q_A_Prob"] > 0.9
    assert t["forget_Q_A_Prob"] - u["forget_Q_A_Prob"] > 0.3
    assert u["forget_Q_A_Prob"] - r["forget_Q_A_Prob"] > 0.1
    # forget quality (KS p-value against the retain model): retain (1.0) > unlearned > target
    assert r["forget_quality"] == 1.0
    assert u["forget_quality"] < 0.1 * r["forget_quality"]
    assert u["forget_quality"] > 100 * t["forget_quality"]
    # truth ratio moves from the target's towards the retain model's
    assert t["forget_truth_ratio"] < u["forget_truth_ratio"] < r["forget_truth_ratio"]
    # ROUGE: the target reproduces answers; the retain model cannot know the forget authors
    assert t["retain_Q_A_ROUGE"] > 0.9 and r["retain_Q_A_ROUGE"] > 0.9
    assert t["forget_Q_A_ROUGE"] > u["forget_Q_A_ROUGE"] > r["forget_Q_A_ROUGE"]
    assert t["forget_Q_A_ROUGE"] - r["forget_Q_A_ROUGE"] > 0.5


def test_signal_matches_manifest(signal):
    for name in NAMES:
        recorded = MANIFEST["signal"][name]
        for key, value in recorded.items():
            if key == "forget_quality":
                assert signal[name][key] == pytest.approx(value, rel=1e-3), (name, key)
            else:
                assert signal[name][key] == pytest.approx(value, abs=SIGNAL_ATOL), (name, key)


# ---------------------------------------------------------------- (d) full rebuild

@pytest.mark.slow
def test_rebuild_reproduces_bundled_assets(tmp_path):
    """Rebuild everything (about 30 s) and compare with the bundled files."""
    from safetensors.numpy import load_file

    manifest = make_assets.build_all(tmp_path, log=None)
    assert manifest["signal_ok"]
    for rel, digest in MANIFEST["files"].items():
        if not rel.startswith("models/"):
            assert manifest["files"][rel] == digest, rel
    worst = {}
    for name in NAMES:
        new = load_file(str(tmp_path / "models" / name / "model.safetensors"))
        old = load_file(str(MODELS / name / "model.safetensors"))
        assert sorted(new) == sorted(old)
        worst[name] = max(float(abs(new[k] - old[k]).max()) for k in old)
        assert worst[name] <= WEIGHT_ATOL, (name, worst[name])
    for name in NAMES:
        for key, value in MANIFEST["signal"][name].items():
            if key != "forget_quality":
                assert manifest["signal"][name][key] == pytest.approx(value, abs=10 * SIGNAL_ATOL), (name, key)
    if manifest["environment"] == MANIFEST["environment"]:
        # same CPU model and library versions as the bundled build: byte for byte
        assert manifest["files"] == MANIFEST["files"], worst
