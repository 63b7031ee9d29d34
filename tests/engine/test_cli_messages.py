"""What a new user's first commands say: a misspelled metric answered with the name meant,
every option's help, help without a benchmark, and Ctrl-C in a run (one line, exit 130, a
rerun resumes). Each case runs the user's command and asserts the message or the file it leaves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import json
from pathlib import Path

import pytest

from evaldag.engine import cli
from evaldag.engine.cli.main import parser

FIX = Path(__file__).parents[1] / "fixtures"
BIN = Path(sys.executable).parent
TOFU = ["--model", str(FIX / "tiny-llama" / "target"), "--data", str(FIX / "tofu_tiny")]


# ---------------------------------------------------------------------- item 7: typos and help
def test_a_misspelled_metric_is_answered_with_the_name_meant_before_the_list(tmp_path, capsys):
    code = cli.main(["run", "tofu", *TOFU, "--metrics", "forget_qualty", "--out", str(tmp_path / "o"),
                     "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "did you mean forget_quality? known: " in err, err
    assert not (tmp_path / "o").exists()


def test_a_misspelled_metric_across_benchmarks_and_an_added_metric_are_answered_too(tmp_path, capsys):
    code = cli.main(["run", "toy", "tofu", *TOFU, "--metrics", "forget_qualty", "--out", str(tmp_path / "o")])
    assert code == 2 and "did you mean forget_quality?" in capsys.readouterr().err
    code = cli.main(["run", "toy", "--add-metric", "exact_memorisation", "--out", str(tmp_path / "o"),
                     "--cache-dir", str(tmp_path / "c")])
    assert code == 2 and "did you mean exact_memorization?" in capsys.readouterr().err


@pytest.mark.parametrize("words", [["run", "tofu"], ["run", "muse"], ["run", "weat"], ["run", "editing"],
                                   ["run", "probes"], ["graph"], ["graph", "tofu"], ["run"]])
def test_every_option_says_what_it_is_for(words):
    sub = parser(words[1:], command=words[0])._subparsers._group_actions[0].choices[words[0]]
    bare = [a.option_strings or [a.dest] for a in sub._actions if not (a.help or "").strip()]
    assert bare == [], f"options without help in `evaldag {' '.join(words)} --help`: {bare}"


@pytest.mark.parametrize("command", ["run", "graph"])
def test_help_without_a_benchmark_says_how_to_see_a_benchmarks_options(command, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert f"`evaldag {command} tofu --help`" in " ".join(out.split()) and "--model, --data" in out


def test_run_tofu_help_shows_the_dtype_choices_explained(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "tofu", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--dtype {auto,bf16,fp16,fp32} weights dtype" in out


# ---------------------------------------------------------------------- item 6: Ctrl-C
def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.slow
def test_ctrl_c_in_the_middle_of_a_run_is_one_line_exit_130_and_a_rerun_resumes(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    argv = [str(BIN / "evaldag"), "run", "tofu", *TOFU, "--metrics", "all", "--retain-model",
            str(FIX / "tiny-llama" / "retain"), "--reference-model", str(FIX / "tiny-llama" / "retain"),
            "--max-new-tokens", "8", "--deterministic", "--out", str(out), "--cache-dir", str(cache), "--quiet"]
    p = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    # wait until the run has stored some nodes, then press Ctrl-C
    while time.monotonic() < deadline and p.poll() is None:
        if len(list((cache / "objects").glob("*/*.safetensors"))) >= 3:
            break
        time.sleep(0.05)
    assert p.poll() is None, "the run ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    m = re.fullmatch(r"evaldag: interrupted: (\d+) nodes and (\d+) model results kept; rerun to resume\n", err)
    assert m, err[-3000:]
    kept_nodes, kept_answers = int(m[1]), int(m[2])
    # the line counts the nodes this run stored (the wait saw >= 3 value files; one may have been published
    # while the line was being counted): at least one, and never more than the cache holds
    assert 1 <= kept_nodes <= len(list((cache / "objects").glob("*/*.safetensors")))
    assert not (out / "TOFU_EVAL.json").exists()
    # the rerun resumes: what the line said was kept is read back, not recomputed
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    cached = sum(1 for n in run["nodes"].values() if n["status"] == "cached")
    assert cached >= kept_nodes
    # no kept model answer is asked again: what the rerun forwards and what the line said was kept are
    # disjoint parts of the whole run's requests (the kept answers are read back where a node still needs
    # them; where the signal fell between stages every one of them may belong to a node already stored)
    cold = subprocess.run([*argv[:-5], "--out", str(tmp_path / "cold"), "--cache-dir", str(tmp_path / "cold-cache"), "--quiet"],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert cold.returncode == 0, cold.stderr[-3000:]
    whole = json.loads((tmp_path / "cold" / "run.json").read_text())["executor"]
    again = run["executor"]["sequences_forwarded"]
    assert kept_answers > 0 and again + kept_answers <= whole["unique"] == whole["sequences_forwarded"]
