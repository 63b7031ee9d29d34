"""A server's impossible answers: ``evaldag run tofu --model openai:URL`` against the tests' own
misbehaving server (``tests/answer_server.py``, the tiny Llama fixture behind an
OpenAI-compatible API), one row per way of answering wrong.

* NaN / Infinity / -Infinity / 3.0 / null log-prob, rank 0, a missing position, echo through a
  template that adds or replaces a token: must fail clearly (exit 2, one line naming the
  server, no --out); then the server is fixed and the same cache rerun must give the
  Hugging Face backend's number (nothing of the bad answers stored);
* an honest server (prompt log-probs, echo): the hf number, and no "non-finite" note;
* impossible answers already in the request store (written as an older evaldag stored them):
  a ``--refresh nodes`` rerun must not serve them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))
REFUSED = {"NaN log-prob": ("nan", "NaN"), "Infinity log-prob": ("inf", "Infinity"),
           "-Infinity log-prob": ("-inf", "-Infinity"), "log-prob 3.0": ("positive", "3.0"),
           "null log-prob": ("null", "null"), "rank 0": ("rank0", "rank 0"),
           "a position missing": ("short", "prompt log-probs"),
           "echo: template adds a token": ("echo_shift", "echo"),
           "echo: template replaces a token": ("echo_swap", "echo")}


def _server_module():
    spec = importlib.util.spec_from_file_location("answer_server", ROOT / "tests" / "answer_server.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(model: str, out: Path, cache: Path, *extra: str, tokenizer: bool = True) -> subprocess.CompletedProcess:
    cmd = [EVALDAG, "run", "tofu", "--model", model, "--tofu-data", str(FIX / "tofu_tiny"), "--metrics",
           "forget_Q_A_Prob", "--out", str(out), "--cache-dir", str(cache), "--quiet", *extra]
    if tokenizer:
        cmd += ["--tokenizer", str(FIX / "tiny-llama" / "target")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -999, "", f"timeout: {e}")


def _got(out: Path) -> tuple | None:
    """forget_Q_A_Prob to 6 digits and its note (None when there is none)."""
    try:
        v = json.loads((out / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]
    except (OSError, ValueError, KeyError):
        return None
    x = v.get("agg_value")
    return (round(x, 6) if isinstance(x, float) else x, v.get("reason") or None)


def run(campaign) -> None:
    d = campaign.trial_dir()
    ref = _run(str(FIX / "tiny-llama" / "target"), d / "out", d / "cache", "--device", "cpu", "--dtype", "fp32",
               tokenizer=False)
    want = _got(d / "out")
    if ref.returncode != 0 or want is None:
        raise SystemExit(f"server_answers: the hf reference run failed:\n{ref.stderr[-2000:]}")
    server = _server_module()
    srv = server.AnswerServer("honest")
    model = f"openai:{srv.url}/v1"
    try:
        for kind, (fault, word) in REFUSED.items():
            d = campaign.trial_dir()
            srv.fault = fault
            proc = _run(model, d / "out", d / "cache")
            campaign._refused(f"server: {kind}", proc, d / "out", [model, word])
            srv.fault = "echo" if fault.startswith("echo") else "honest"
            proc = _run(model, d / "fixed", d / "cache")  # the server fixed, the same cache
            campaign.classify(f"server: {kind}, rerun once fixed", proc, _got(d / "fixed"), want)
        for kind, fault in (("server: honest prompt log-probs", "honest"), ("server: honest echo", "echo")):
            d = campaign.trial_dir()
            srv.fault = fault
            proc = _run(model, d / "out", d / "cache")
            got = _got(d / "out")
            campaign.classify(kind, proc, got, want, "" if got == want else f"got {got}, want {want}")
        d = campaign.trial_dir()
        srv.fault = "honest"
        _run(model, d / "out", d / "cache")
        planted = server.plant_nan(d / "cache")
        proc = _run(model, d / "again", d / "cache", "--refresh", "nodes")
        got = _got(d / "again")
        campaign.classify("server: NaN already in the request store", proc, got, want,
                          "" if got == want else f"{planted} planted; got {got}, want {want}")
    finally:
        srv.stop()
