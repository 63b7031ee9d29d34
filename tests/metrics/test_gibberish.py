"""forget_Q_A_gibberish / forget_gibberish: open-unlearning's classification_prob,
through a plugin request kind (classify_text) served by a sequence-classifier backend.

The reference below is open-unlearning's handler (src/evals/metrics/utility.py,
``classification_prob``) restated in plain transformers: batches of 32 texts in item order,
``tokenizer(texts, padding=True, truncation=True, max_length=...)``, softmax of the logits,
column ``class_id``, mean over items. The classifier is a random two-label
LlamaForSequenceClassification on the fixture tokenizer, built here.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine import cli

FIX = Path(__file__).parents[1] / "fixtures"
MODEL = FIX / "tiny-llama" / "target"
TOFU = ["--tofu-data", str(FIX / "tofu_tiny"), "--max-new-tokens", "16"]


def _classifier(folder: Path, pad: bool = True, causal: bool = False) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    tok = AutoTokenizer.from_pretrained(MODEL)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, num_labels=2, pad_token_id=tok.pad_token_id, initializer_range=0.5)
    torch.manual_seed(0)
    model = (LlamaForCausalLM if causal else LlamaForSequenceClassification)(cfg)
    model.save_pretrained(folder)
    if not pad:
        tok.pad_token = None
    tok.save_pretrained(folder)
    if not pad:  # the saved files name no pad token at all
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            if not (folder / name).is_file():
                continue
            data = json.loads((folder / name).read_text())
            data.pop("pad_token", None)
            (folder / name).write_text(json.dumps(data))
    return folder


def reference(classifier: Path, texts: list[str], max_length: int, class_id: int = 0, batch_size: int = 32):
    """open-unlearning's classification_prob, in a few lines of plain transformers."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(classifier)
    model = AutoModelForSequenceClassification.from_pretrained(classifier).eval()
    scores = []
    for at in range(0, len(texts), batch_size):
        inputs = tok(texts[at : at + batch_size], return_tensors="pt", padding=True, truncation=True,
                     max_length=max_length, return_attention_mask=True)
        with torch.no_grad():
            scores += torch.softmax(model(**inputs).logits, dim=-1)[:, class_id].tolist()
    return scores, float(np.mean(scores))


def _run(tmp: Path, name: str, bench: str, *argv: str) -> dict:
    out = tmp / name
    assert cli.main(["run", bench, "--quiet", "--model", str(MODEL), "--out", str(out), "--cache-dir", str(tmp / "cache"), *argv]) == 0
    group = bench.upper()
    return {"eval": json.loads((out / f"{group}_EVAL.json").read_text()), "run": json.loads((out / "run.json").read_text())}


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return _classifier(tmp_path_factory.mktemp("cls") / "classifier")


@pytest.fixture(scope="module")
def tofu_runs(tmp_path_factory, classifier):
    tmp = tmp_path_factory.mktemp("gib")
    rouge = _run(tmp, "rouge", "tofu", *TOFU, "--metrics", "forget_Q_A_ROUGE")
    gib = _run(tmp, "gib", "tofu", *TOFU, "--metrics", "forget_Q_A_ROUGE,forget_Q_A_gibberish", "--classifier-model", str(classifier))
    return rouge, gib


def test_tofu_gibberish_equals_open_unlearning(tofu_runs, classifier):
    rouge, gib = tofu_runs
    ours = gib["eval"]["forget_Q_A_gibberish"]
    items = rouge["eval"]["forget_Q_A_ROUGE"]["value_by_index"]
    texts = [items[k]["generation"] for k in items]
    assert len(texts) == 40 and len(set(texts)) > 5  # the tiny model babbles a variety
    scores, agg = reference(classifier, texts, max_length=32)  # forget_Q_A_gibberish.yaml's cut
    assert list(ours["value_by_index"]) == list(items)
    for (k, item), s, t in zip(ours["value_by_index"].items(), scores, texts):
        assert set(item) == {"score", "generation"} and item["generation"] == t
        # evaldag batches by length, the reference in item order: other padding, other float32
        # sums (item 14 differed by 1.01e-6 on one machine, under 1e-6 on another)
        assert item["score"] == pytest.approx(s, abs=1e-5), k
    assert ours["agg_value"] == pytest.approx(agg, abs=1e-6)
    assert not 0.4 < min(scores) and max(scores) > min(scores)  # scores that tell the texts apart


def test_adding_the_metric_costs_only_the_classifier(tofu_runs):
    _, gib = tofu_runs
    ex = gib["run"]["executor"]["by_kind"]
    assert set(ex) == {"classify_text"}  # the generations node is read from the store: not one generate request
    assert gib["run"]["executor"]["models_loaded"] and len(gib["run"]["executor"]["models_loaded"]) == 1
    assert ex["classify_text"]["sequences_forwarded"] == 40


def test_class_id_and_max_length_flags(tmp_path, classifier, tofu_runs):
    rouge, _ = tofu_runs
    items = rouge["eval"]["forget_Q_A_ROUGE"]["value_by_index"]
    texts = [items[k]["generation"] for k in items]
    got = _run(tmp_path, "c1", "tofu", *TOFU, "--metrics", "forget_Q_A_gibberish", "--classifier-model", str(classifier),
               "--classifier-class-id", "1", "--classifier-max-length", "8")["eval"]["forget_Q_A_gibberish"]
    scores, agg = reference(classifier, texts, max_length=8, class_id=1)
    assert not np.allclose(reference(classifier, texts, max_length=32, class_id=1)[0], scores, atol=1e-3)  # the cut matters
    assert [v["score"] for v in got["value_by_index"].values()] == pytest.approx(scores, abs=1e-6)
    assert got["agg_value"] == pytest.approx(agg, abs=1e-6)


def test_muse_forget_gibberish_reads_verbmem_generations(tmp_path, classifier):
    got = _run(tmp_path, "muse", "muse", "--muse-data", str(FIX / "muse_tiny"),
               "--metrics", "forget_verbmem_ROUGE,forget_gibberish", "--classifier-model", str(classifier))["eval"]
    texts = [v["generation"] for v in got["forget_verbmem_ROUGE"]["value_by_index"].values()]
    scores, agg = reference(classifier, texts, max_length=512)  # muse_metrics/forget_gibberish.yaml's cut
    assert [v["score"] for v in got["forget_gibberish"]["value_by_index"].values()] == pytest.approx(scores, abs=1e-6)
    assert got["forget_gibberish"]["agg_value"] == pytest.approx(agg, abs=1e-6)


def test_metrics_all_includes_them_only_with_a_classifier():
    from evaldag.benchmarks.muse.config import MuseConfig
    from evaldag.benchmarks.tofu.config import TofuConfig

    assert "forget_Q_A_gibberish" not in TofuConfig(metrics="all").metrics
    assert "forget_Q_A_gibberish" in TofuConfig(metrics="all", classifier_model="x").metrics
    assert "forget_gibberish" not in MuseConfig(metrics=("all",)).metrics
    assert "forget_gibberish" in MuseConfig(metrics=("all",), classifier_model="x").metrics
    with pytest.raises(ValueError, match="forget_Q_A_gibberish needs a sequence classifier: give --classifier-model"):
        TofuConfig(metrics=("default", "forget_Q_A_gibberish"))
    # the command line's --metrics all, without and with --classifier-model
    from argparse import Namespace

    from evaldag.engine.registry import BENCHMARKS

    tofu = BENCHMARKS.get("tofu")
    assert "forget_Q_A_gibberish" not in tofu.metrics_from_args(Namespace(metrics="all", classifier_model=None))
    assert "forget_Q_A_gibberish" in tofu.metrics_from_args(Namespace(metrics="all", classifier_model="x"))
    assert "forget_Q_A_gibberish" in tofu.metrics_from_args(Namespace(metrics="default,forget_Q_A_gibberish", classifier_model=None))


def evaldag(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _one_line(done, *words):
    code, err = done
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evaldag: error: ") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_bad_input_one_line_each(tmp_path, classifier, capsys):
    base = ["run", "tofu", "--model", MODEL, *TOFU, "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache"]
    _one_line(evaldag(capsys, *base, "--metrics", "forget_Q_A_gibberish"), "forget_Q_A_gibberish needs a sequence classifier")
    causal = _classifier(tmp_path / "causal", causal=True)
    _one_line(evaldag(capsys, *base, "--metrics", "forget_Q_A_gibberish", "--classifier-model", causal),
              f"--classifier-model {causal}", "LlamaForCausalLM, not a sequence classifier")
    _one_line(evaldag(capsys, *base, "--metrics", "forget_Q_A_gibberish", "--classifier-model", classifier, "--classifier-class-id", "2"),
              "--model-arg classifier:class_id=2", "has 2 labels (0..1)")
    nopad = _classifier(tmp_path / "nopad", pad=False)
    _one_line(evaldag(capsys, *base, "--metrics", "forget_Q_A_gibberish", "--classifier-model", nopad), "tokenizer has no pad token")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
