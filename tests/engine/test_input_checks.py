"""A run's inputs checked up front: missing model and data paths, the reference model's default,
a zero model utility or a NaN named by its input, tokenizers without a pad token or with another
vocabulary. Each case runs the user's command and asserts the message or the file it leaves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaldag.engine import cli

FIX = Path(__file__).parents[1] / "fixtures"
TARGET, RETAIN = FIX / "tiny-llama" / "target", FIX / "tiny-llama" / "retain"
DATA = FIX / "tofu_tiny"


def run(tmp_path, *argv):
    return cli.main(["run", "tofu", *argv, "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])


# ---------------------------------------------------------------------- item 1: a path that is not there
@pytest.mark.parametrize("flag, value", [("--model", "ckpt/"), ("--model", "./ckpt"), ("--model", "~/no/ckpt"),
                                         ("--model", "runs/a/ckpt"), ("--retain-model", "./x"),
                                         ("--reference-model", "retain/")])
def test_a_missing_path_shaped_model_is_no_such_folder(tmp_path, monkeypatch, capsys, flag, value):
    monkeypatch.chdir(tmp_path)
    argv = ["--model", str(TARGET)] if flag != "--model" else []
    code = run(tmp_path, *argv, flag, value, "--data", str(DATA))
    err = capsys.readouterr().err
    assert code == 2 and err == f"evaldag: error: {flag} {value}: no such folder: {value}\n", err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["nodata/", "./nodata", "a/b/c"])
def test_a_missing_path_shaped_data_folder_is_no_such_folder_not_install_datasets(tmp_path, monkeypatch, capsys, value):
    monkeypatch.chdir(tmp_path)
    code = run(tmp_path, "--model", str(TARGET), "--data", value)
    err = capsys.readouterr().err
    assert code == 2 and err == f"evaldag: error: --data {value}: no such folder: {value}\n", err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------- item 2: the reference model
NOTE = "evaldag: note: --reference-model not given: the Reference attack (mia_reference) uses --retain-model {}\n"


def test_the_reference_attack_defaults_to_the_retain_model_and_says_so(tmp_path, capsys):
    code = run(tmp_path, "--model", str(TARGET), "--data", str(DATA), "--retain-model", str(RETAIN),
               "--metrics", "mia_reference", "--quiet")
    err = capsys.readouterr().err
    assert code == 0, err
    assert err == NOTE.format(RETAIN), err
    evaluated = json.loads((tmp_path / "o" / "TOFU_EVAL.json").read_text())
    assert isinstance(evaluated["mia_reference"]["agg_value"], float)


def test_an_explicit_reference_model_prints_no_note(tmp_path, capsys):
    code = run(tmp_path, "--model", str(TARGET), "--data", str(DATA), "--retain-model", str(RETAIN),
               "--reference-model", str(RETAIN), "--metrics", "mia_reference", "--quiet")
    assert code == 0 and "note" not in capsys.readouterr().err


def test_a_missing_reference_model_names_the_metric_not_internal_nodes(tmp_path, capsys):
    code = run(tmp_path, "--model", str(TARGET), "--data", str(DATA), "--metrics", "mia_reference")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "'reference_model' (needed by mia_reference)" in err and "qa_stats[" not in err, err
    assert "pass --reference-model DIR" in err, err


# ---------------------------------------------------------------------- item 14: a collapsed aggregate says why
def test_a_zero_model_utility_names_the_input_that_made_it_zero(tmp_path, capsys):
    import shutil

    data = tmp_path / "tofu"
    shutil.copytree(DATA, data)
    ra = data / "real_authors_perturbed.json"
    rows = [json.loads(line) for line in ra.read_text().splitlines() if line.strip()]
    ra.write_text("".join(json.dumps({**r, "answer": "Zzyzxq"}) + "\n" for r in rows))  # no generation has it
    code = run(tmp_path, "--model", str(TARGET), "--data", str(data), "--metrics", "model_utility")
    out = capsys.readouterr().out
    assert code == 0
    evaluated = json.loads((tmp_path / "o" / "TOFU_EVAL.json").read_text())
    assert evaluated["ra_Q_A_ROUGE"]["agg_value"] == 0.0
    assert evaluated["model_utility"]["agg_value"] == 0.0
    assert evaluated["model_utility"]["reason"] == "0 because ra_Q_A_ROUGE is 0"
    line = next(x for x in out.splitlines() if x.strip().startswith("model_utility "))
    assert line.endswith("(0 because ra_Q_A_ROUGE is 0)"), line


def test_a_nan_input_is_named_by_the_harmonic_mean():
    from evaldag.metrics.unlearning.utility import harmonic_mean

    assert harmonic_mean({"a": 0.5, "b": float("nan")})["reason"] == "NaN because b has no value"
    assert harmonic_mean({"a": 0.0, "b": 0.5, "c": 0.0})["reason"] == "0 because a, c are 0"
    assert "reason" not in harmonic_mean({"a": 0.5, "b": 0.25})


# ---------------------------------------------------------------------- item 12: two numbers, each said
def test_the_truth_ratio_histogram_says_which_aggregation_the_legend_and_the_table_show(tmp_path, capsys):
    code = run(tmp_path, "--model", str(TARGET), "--data", str(DATA), "--metrics", "forget_truth_ratio", "--quiet")
    assert code == 0, capsys.readouterr().err
    evaluated = json.loads((tmp_path / "o" / "TOFU_EVAL.json").read_text())["forget_truth_ratio"]
    scores = [v["score"] for v in evaluated["value_by_index"].values()]
    assert abs(sum(min(t, 1 / (t + 1e-10)) for t in scores) / len(scores) - evaluated["agg_value"]) < 1e-9
    assert cli.main(["report", str(tmp_path / "o"), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "The legend&#x27;s mean is the plain mean of the per-item ratios drawn" in page or \
        "The legend's mean is the plain mean of the per-item ratios drawn" in page
    assert (f"table: forget_truth_ratio = {evaluated['agg_value']:.4g}: mean of min(tr, 1/tr) (closer_to_1_better)"
            in page), page[:2000]


# ---------------------------------------------------------------------- item 4: a GPT-2-shaped tokenizer
def test_a_tokenizer_without_pad_whose_bos_is_its_eos_gets_one_warning_pointing_to_the_option(tmp_path, capsys):
    import shutil

    model = tmp_path / "gpt2ish"
    shutil.copytree(TARGET, model)
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        data = json.loads((model / name).read_text())
        data.pop("pad_token", None)
        data["bos_token"] = data["eos_token"] = "<|endoftext|>"
        (model / name).write_text(json.dumps(data))
    code = run(tmp_path, "--model", str(model), "--data", str(DATA), "--metrics", "forget_Q_A_Prob", "--quiet")
    err = capsys.readouterr().err
    assert code == 0, err
    warned = [x for x in err.splitlines() if "bos equals its eos" in x]
    assert warned == [f"evaldag: warning: --model {model}: the tokenizer has no pad token and its bos equals its eos, "
                      "so the default masking also hides real bos/eos tokens and changes scores; --attention-mask "
                      "padding masks only padding (docs/gotchas.md)"], err
    code = cli.main(["run", "tofu", "--model", str(model), "--data", str(DATA), "--metrics", "forget_Q_A_Prob",
                     "--attention-mask", "padding", "--quiet", "--out", str(tmp_path / "o2"), "--cache-dir", str(tmp_path / "c")])
    assert code == 0 and "bos equals its eos" not in capsys.readouterr().err
    code = run(tmp_path, "--model", str(TARGET), "--data", str(DATA), "--metrics", "forget_Q_A_Prob", "--quiet")
    assert code == 0 and "bos equals its eos" not in capsys.readouterr().err


def test_a_pad_eos_the_chat_template_writes_gets_the_same_one_warning_under_the_chat_template(tmp_path, capsys):
    """Llama-3-Instruct's shape (ChatML's too): no pad token, so pad = eos = the token ending every chat turn;
    open-unlearning's `ids != pad` masking then hides each turn's end of the prompt. Plain prompts hold none."""
    import shutil

    model = tmp_path / "eot"
    shutil.copytree(TARGET, model)
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        data = json.loads((model / name).read_text())
        data.pop("pad_token", None)
        data["eos_token"] = "<|eot_id|>"
        (model / name).write_text(json.dumps(data))
    code = run(tmp_path, "--model", str(model), "--data", str(DATA), "--metrics", "forget_Q_A_Prob", "--template", "chat",
               "--quiet")
    err = capsys.readouterr().err
    assert code == 0, err
    assert [x for x in err.splitlines() if "warning" in x] == [
        f"evaldag: warning: --model {model}: the chat template writes '<|eot_id|>' after each answer: 1 template token "
        "scored with every answer (--answer-only scores the answer's own tokens only); "
        "and the pad token <|eot_id|> (pad = eos) is also written by the chat template "
        "at each turn's end, so the default masking hides every <|eot_id|> of the prompt from attention and changes "
        "scores; --attention-mask padding masks only padding (docs/gotchas.md)"], err
    code = run(tmp_path, "--model", str(model), "--data", str(DATA), "--metrics", "forget_Q_A_Prob", "--quiet")
    assert code == 0 and "warning" not in capsys.readouterr().err  # the plain template writes no <|eot_id|>


def test_a_checkpoint_without_tokenizer_is_refused_up_front_and_tokenizer_supplies_one(tmp_path, capsys):
    import shutil

    model = tmp_path / "bare"
    shutil.copytree(TARGET, model)
    for p in list(model.iterdir()):
        if p.name.startswith(("tokenizer", "special_tokens")):
            p.unlink()
    code = run(tmp_path, "--model", str(model), "--data", str(DATA), "--metrics", "forget_Q_A_Prob")
    err = capsys.readouterr().err
    assert code == 2 and err == f"evaldag: error: --model {model}: no tokenizer in {model}; pass --model-arg tokenizer=DIR|ID\n", err
    assert not (tmp_path / "o").exists()
    code = run(tmp_path, "--model", str(TARGET), "--data", str(DATA), "--retain-model", str(model), "--metrics", "forget_quality")
    err = capsys.readouterr().err
    assert code == 2 and err == f"evaldag: error: --retain-model {model}: no tokenizer in {model}; pass --model-arg retain:tokenizer=DIR|ID\n", err
    code = run(tmp_path, "--model", str(model), "--tokenizer", str(TARGET), "--data", str(DATA),
               "--metrics", "forget_Q_A_Prob", "--quiet")
    assert code == 0, capsys.readouterr().err
    with_tok = json.loads((tmp_path / "o" / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]
    code = cli.main(["run", "tofu", "--model", str(TARGET), "--data", str(DATA), "--metrics", "forget_Q_A_Prob",
                     "--quiet", "--out", str(tmp_path / "o2"), "--cache-dir", str(tmp_path / "c")])
    assert code == 0
    same = json.loads((tmp_path / "o2" / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]
    assert with_tok["agg_value"] == pytest.approx(same["agg_value"], rel=1e-6)  # the same weights and tokenizer
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.adapters.hf.hf_tokenizer import HFModelTokenizer

    other = tmp_path / "tok2"
    shutil.copytree(TARGET, other)
    config = json.loads((other / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 64}))
    fps = [HFModel(model).fingerprint(), HFModelTokenizer(model, str(TARGET)).fingerprint(),
           HFModelTokenizer(model, str(RETAIN)).fingerprint(), HFModelTokenizer(model, str(other)).fingerprint()]
    assert len(set(fps)) == 3 and fps[1] == fps[2]  # the tokenizer files' hashes are in the fingerprint


def test_a_side_model_with_another_tokenizer_gets_one_warning_naming_the_metrics(tmp_path, capsys):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(RETAIN, other)
    special = json.loads((other / "special_tokens_map.json").read_text())
    special["additional_special_tokens"] = list(reversed(special["additional_special_tokens"]))
    (other / "special_tokens_map.json").write_text(json.dumps(special))
    code = run(tmp_path, "--model", str(TARGET), "--data", str(DATA), "--retain-model", str(other),
               "--metrics", "forget_quality,mia_reference", "--quiet")
    err = capsys.readouterr().err
    assert code == 0, err
    warned = [x for x in err.splitlines() if "different tokenizer" in x]
    assert warned == [f"evaldag: warning: --retain-model {other} has a different tokenizer than --model {TARGET}: "
                      "forget_quality, mia_reference then compare scores computed on different tokenizations"], err
    code = run(tmp_path, "--model", str(TARGET), "--data", str(DATA), "--retain-model", str(RETAIN),
               "--metrics", "forget_quality", "--quiet")
    assert code == 0 and "different tokenizer" not in capsys.readouterr().err


def test_the_same_tokenizer_saved_again_by_a_trainer_gets_no_warning(tmp_path, capsys):
    """A Trainer's checkpoint holds the tokenizer re-saved after a ``truncation=True`` call (its
    tokenizer.json then records that state) and, with transformers 5, no special_tokens_map.json:
    the same tokenizer, no warning. A changed vocabulary entry still warns."""
    import shutil

    from transformers import AutoTokenizer

    saved = tmp_path / "checkpoint-8"
    shutil.copytree(TARGET, saved)
    tok = AutoTokenizer.from_pretrained(str(TARGET))
    tok("a question and its answer", truncation=True, max_length=48)
    (saved / "special_tokens_map.json").unlink()
    tok.save_pretrained(str(saved))
    assert json.loads((saved / "tokenizer.json").read_text())["truncation"] is not None  # the state the old check saw
    code = run(tmp_path, "--model", str(saved), "--data", str(DATA), "--retain-model", str(RETAIN),
               "--metrics", "forget_quality", "--quiet")
    assert code == 0 and "different tokenizer" not in capsys.readouterr().err
    body = json.loads((saved / "tokenizer.json").read_text())
    vocab = body["model"]["vocab"]
    first = next(iter(vocab))
    vocab[first + "x"] = vocab.pop(first)
    (saved / "tokenizer.json").write_text(json.dumps(body))
    code = run(tmp_path, "--model", str(saved), "--data", str(DATA), "--retain-model", str(RETAIN),
               "--metrics", "forget_quality", "--quiet")
    assert "different tokenizer" in capsys.readouterr().err
