"""One bad input, one line: errors named before any model loads, exit 2, nothing written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
MODEL = FIX / "tiny-llama" / "target"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def evaldag(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([EVALDAG, *map(str, argv)], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def one_error_line(done: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, a single `evaldag: error:` line naming ``words``, no traceback."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evaldag: error: "), done.stderr
    assert "Traceback" not in done.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture()
def tofu(tmp_path):
    """`evaldag run tofu` on the fixture data; returns (argv, --out folder)."""
    out = tmp_path / "out"
    return ["run", "tofu", "--tofu-data", FIX / "tofu_tiny", "--out", out, "--cache-dir", tmp_path / "cache"], out


@pytest.mark.parametrize("flag, value", [("--batch-tokens", "-5"), ("--batch-tokens", "0"), ("--n-jobs", "0"),
                                         ("--max-new-tokens", "0"), ("--batch-tokens", "many")])
def test_numeric_options_are_checked_by_the_parser(tofu, flag, value):
    argv, out = tofu
    one_error_line(evaldag(*argv, "--model", MODEL, flag, value), flag, repr(value))
    assert not out.exists()


def test_weat_numeric_options(tmp_path):
    done = evaldag("run", "weat", "--embeddings", FIX / "wefe" / "wefe_subset.npz", "--lost-vocabulary-threshold", "1.5",
                   "--out", tmp_path / "out")
    one_error_line(done, "--lost-vocabulary-threshold", "'1.5'")
    one_error_line(evaldag("run", "weat", "--embeddings", FIX / "wefe" / "wefe_subset.npz", "--p-value-iterations", "0"),
                   "--p-value-iterations")


def test_hub_id_while_offline(tofu):
    argv, out = tofu
    one_error_line(evaldag(*argv, "--model", "no-such-org/no-such-model"), "--model no-such-org/no-such-model",
                   "not in the Hugging Face cache")
    one_error_line(evaldag(*argv, "--model", MODEL, "--retain-model", "./nowhere/retain"), "--retain-model ./nowhere/retain")
    assert not out.exists()


def test_chat_template_on_a_tokenizer_without_one(tofu, tmp_path):
    plain = tmp_path / "plain-tokenizer"
    plain.mkdir()
    for f in MODEL.iterdir():
        if f.name != "tokenizer_config.json":
            (plain / f.name).symlink_to(f)
    config = json.loads((MODEL / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    argv, out = tofu
    one_error_line(evaldag(*argv, "--model", plain, "--template", "chat"), "--template chat", "no chat template", str(plain))
    assert not out.exists()


def test_embeddings_whose_words_and_vectors_differ(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, words=np.array(["a", "b", "c"]), vectors=np.zeros((2, 4), dtype=np.float32))
    out = tmp_path / "out"
    one_error_line(evaldag("run", "weat", "--embeddings", bad, "--out", out, "--cache-dir", tmp_path / "c"),
                   str(bad), "3 words but 2 vectors")
    assert not out.exists()


def test_weat_model_and_embeddings_together_is_an_error(tmp_path):
    one_error_line(evaldag("run", "weat", "--embeddings", FIX / "wefe" / "wefe_subset.npz", "--model", MODEL,
                           "--out", tmp_path / "out"), "--embeddings", "--model", "not both")


def test_weat_help_shows_only_what_weat_reads():
    text = evaldag("run", "weat", "--help").stdout
    assert "--embeddings" in text and "--model" in text and "--device" in text
    for other in ("--retain-model", "--reference-model", "--template", "--joint-tokenization", "--retain-logs", "--tofu-data"):
        assert other not in text


def test_cache_dir_that_is_a_file_and_out_that_cannot_be_written(tofu, tmp_path):
    argv, out = tofu
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    one_error_line(evaldag("run", "toy", "--cache-dir", a_file, "--out", out), "--cache-dir", "a file, not a folder")
    one_error_line(evaldag("run", "toy", "--out", a_file / "sub", "--cache-dir", tmp_path / "c"), "--out", "is a file")
    assert not (tmp_path / "c").exists()


def test_a_device_this_machine_lacks():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda is valid here")
    one_error_line(evaldag("run", "tofu", "--tofu-data", FIX / "tofu_tiny", "--model", MODEL, "--device", "cuda"),
                   "--device cuda", "0 CUDA device")


def test_run_without_a_benchmark_lists_them():
    done = evaldag("run")
    assert done.returncode == 2 and done.stderr.startswith("evaldag: error: name the benchmarks to run")
    assert all(f"\n  {name} " in done.stderr for name in ("toy", "tofu", "muse", "weat"))


def test_graph_cache_status_without_data_draws_the_plan_and_warns(tmp_path):
    done = evaldag("graph", "tofu", "--cache-dir", tmp_path / "c")
    assert done.returncode == 0 and done.stdout.startswith("flowchart LR") and "forget_quality" in done.stdout
    assert "evaldag: warning: tofu: cannot bind its data or models" in done.stderr and "Traceback" not in done.stderr


def test_a_nan_row_in_the_terminal_carries_its_reason(tmp_path, capsys):
    from evaldag.engine import Result, metric, run
    from evaldag.engine.outputs import print_run

    @metric("nan_with_reason", version="1", register=False)
    def nan_with_reason():
        return Result.nan("the forget set has no rows")

    print_run(run([nan_with_reason(name="empty", group="T")], {}, cache=tmp_path / "c"))
    line = next(x for x in capsys.readouterr().out.splitlines() if "empty" in x)
    assert "nan" in line and line.endswith("(the forget set has no rows)")


def test_refresh_nodes_requests_and_all(tmp_path):
    """nodes: aggregations redone on cached answers; requests: the model is asked again; run.json says which."""
    import json as _json

    out, cache = tmp_path / "out", tmp_path / "cache"
    base = ["run", "toy", "--out", out, "--cache-dir", cache, "--quiet"]

    def run_json(*extra):
        done = evaldag(*base, *extra)
        assert done.returncode == 0, done.stderr
        return _json.loads((out / "run.json").read_text())

    first = run_json()
    assert first["refresh"] == "none" and first["executor"]["sequences_forwarded"] == 12
    summary = (out / "TOY_SUMMARY.json").read_text()
    for how, forwarded in (("nodes", 0), ("requests", 12), ("all", 12)):
        again = run_json("--refresh", how)
        assert again["refresh"] == how
        assert all(n["status"] == "computed" for n in again["nodes"].values())
        assert again["executor"]["sequences_forwarded"] == forwarded and again["executor"]["model_loaded"] is (forwarded > 0)
        assert (out / "TOY_SUMMARY.json").read_text() == summary  # the same numbers
    forced = run_json("--force")  # the refreshed answers were stored: all 12 come from the request cache
    assert forced["refresh"] == "nodes" and forced["executor"]["cached"] == 12 and forced["executor"]["sequences_forwarded"] == 0
    assert run_json()["refresh"] == "none"
