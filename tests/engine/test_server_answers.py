"""A server's impossible answers, run as a user runs them: ``evaldag run tofu --model openai:URL``
against a small server of the tests' own on 127.0.0.1 (``tests/answer_server.py``) that answers
from the tiny Llama fixture, honestly or with one fault.

* NaN, Infinity, -Infinity, 3.0, null, rank 0 or a missing position: one ``evaldag: error:`` line
  naming the server, exit 2, no outputs, nothing stored (the fixed server's rerun asks again);
* an honest server's run carries no "non-finite logits" note (the statistics a server cannot
  give are "not available", not NaN) and gives the Hugging Face backend's number;
* echo log-probs whose positions are not the prompt's (a template that adds or replaces a
  token) are refused; honest echo gives the same number;
* impossible answers already in a request store are not served: asked again.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ..answer_server import FIXTURE, AnswerServer, plant_nan
from ..inprocess import run_cli

TOFU_TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tofu_tiny"
HF_VALUE = 0.9821279  # forget_Q_A_Prob of the fixture through the hf backend (cpu fp32): 0.982127929...


@pytest.fixture(scope="module")
def server():
    s = AnswerServer("honest")
    yield s
    s.stop()


def run(server, tmp_path: Path, out: str, *extra: str) -> subprocess.CompletedProcess:
    return run_cli(["run", "tofu", "--model", f"openai:{server.url}/v1", "--tokenizer", str(FIXTURE),
                    "--tofu-data", str(TOFU_TINY), "--metrics", "forget_Q_A_Prob", "--out", str(tmp_path / out),
                    "--cache-dir", str(tmp_path / "cache"), *extra])


def value(out: Path) -> dict:
    return json.loads((out / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]


WANT = {"nan": "log-prob NaN", "inf": "log-prob Infinity", "-inf": "log-prob -Infinity",
        "positive": "log-prob 3.0 at token", "null": "is null, not a number", "rank0": "has rank 0",
        "short": "39 prompt log-probs for a 40-token prompt"}


@pytest.mark.parametrize("fault", list(WANT))
def test_an_impossible_answer_is_one_line_exit_2_and_nothing_is_stored(fault, server, tmp_path):
    server.fault = fault
    try:
        r = run(server, tmp_path, "bad")
    finally:
        server.fault = "honest"
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("evaldag: error: "), r.stderr[-2000:]
    assert f"openai:{server.url}/v1" in lines[0] and WANT[fault] in lines[0], lines[0]
    assert not (tmp_path / "bad").exists()
    fixed = run(server, tmp_path, "fixed")  # the server fixed: nothing of the bad answers is served
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert "40 asked, 40 unique, 0 from cache, 40 forwarded" in fixed.stdout
    assert value(tmp_path / "fixed")["agg_value"] == pytest.approx(HF_VALUE, abs=1e-6)


def test_an_honest_server_carries_no_nonfinite_note_and_gives_hfs_number(server, tmp_path):
    r = run(server, tmp_path, "out")
    assert r.returncode == 0, r.stderr[-2000:]
    v = value(tmp_path / "out")
    assert v["agg_value"] == pytest.approx(HF_VALUE, abs=1e-6) and not v.get("reason"), v.get("reason")
    assert "non-finite" not in r.stdout + r.stderr
    summary = json.loads((tmp_path / "out" / "TOFU_SUMMARY.json").read_text())
    assert summary["forget_Q_A_Prob"] == pytest.approx(HF_VALUE, abs=1e-6)
    warm = run(server, tmp_path, "warm")
    assert warm.returncode == 0 and "nodes: 0 computed" in warm.stdout and "non-finite" not in warm.stdout


@pytest.mark.parametrize("fault,want", [("echo_shift", "echo counted 620 prompt tokens for prompts of 614"),
                                        ("echo_swap", "echo gave token 'token_id:1' at position 0 where the prompt has token 0")])
def test_echo_positions_that_are_not_the_prompts_are_refused(fault, want, server, tmp_path):
    server.fault = fault
    try:
        r = run(server, tmp_path, "bad")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("evaldag: error: "), r.stderr[-2000:]
        assert f"openai:{server.url}/v1" in lines[0] and want in lines[0], lines[0]
        assert not (tmp_path / "bad").exists()
        server.fault = "echo"  # the same server through an honest template: the prompt's positions
        ok = run(server, tmp_path, "ok")
    finally:
        server.fault = "honest"
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert value(tmp_path / "ok")["agg_value"] == pytest.approx(HF_VALUE, abs=1e-6)


def test_impossible_answers_already_stored_are_asked_again(server, tmp_path):
    """A request store written before answers were checked: its NaN is not served."""
    assert run(server, tmp_path, "out").returncode == 0
    planted = plant_nan(tmp_path / "cache")
    assert planted == 10
    r = run(server, tmp_path, "again", "--refresh", "nodes")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "40 asked, 40 unique, 30 from cache, 10 forwarded" in r.stdout, r.stdout
    assert "10 stored token_stats answers" in r.stderr and "asked again" in r.stderr
    assert value(tmp_path / "again")["agg_value"] == pytest.approx(HF_VALUE, abs=1e-6)
    assert "non-finite" not in r.stdout
