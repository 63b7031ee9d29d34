"""``--fallback`` against real servers on 127.0.0.1, through the CLI (its entry point in the test's process): a fallback with other
weights is refused in one line naming both models, with nothing stored; the same weights
are accepted, give hf:'s numbers, and every number says which backend served it (terminal,
EVAL, report); a metric that needs what only the fallback has does not move the numbers the
server can compute.

* ``transformers serve`` holding the TOFU fixture's target (it gives no log-probs, so every
  token statistic goes to the fallback): the retain model as fallback is the case found.
* vLLM holding the server tests' model (prompt log-probs, no full-vocabulary statistics):
  Min-K%++ needs the fallback, forget_Q_A_Prob does not.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ..inprocess import run_cli
from ..servers import REPO, TOFU_TINY, VLLM_KEY, build_tiny_llama, start_transformers_serve

TINY = REPO / "tests" / "fixtures" / "tiny-llama"
LOGPROB_TOLERANCE = 0.05  # engine/sameweights.py, documented in docs/servers.md


def evaldag(args, cache, **env):
    """``evaldag run tofu ...`` in the test's process (``env``: variables set for that run only)."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        return run_cli(["run", "tofu", "--tofu-data", str(TOFU_TINY), "--max-new-tokens", "8", "--cache-dir", str(cache),
                        "--no-progress", *args])


def nodes_stored(cache: Path) -> list[Path]:
    """The node store's entries (the probe's own requests are stored like any, under each backend's key)."""
    return [p for p in (cache / "objects").rglob("*.safetensors")] if (cache / "objects").exists() else []


def evals(out: Path) -> dict:
    return json.loads((out / "TOFU_EVAL.json").read_text())


@pytest.fixture(scope="module")
def target_server(tmp_path_factory):
    """transformers serve holding the TOFU fixture's target (its forget_Q_A_Prob is 0.982)."""
    srv = start_transformers_serve(TINY / "target", tmp_path_factory.mktemp("serve-target"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def hf_target(tmp_path_factory):
    """The target's numbers through hf: alone: what a right fallback must reproduce."""
    tmp = tmp_path_factory.mktemp("hf-target")
    r = evaldag(["--model", f"hf:{TINY / 'target'}", "--metrics", "forget_Q_A_Prob,retain_Q_A_Prob,forget_Q_A_ROUGE",
                 "--out", str(tmp / "out")], tmp / "cache")
    assert r.returncode == 0, r.stderr[-2000:]
    return evals(tmp / "out")


def test_the_retain_model_as_fallback_is_refused_in_one_line(target_server, tmp_path):
    r = evaldag(["--model", f"openai:{target_server.url}/v1", "--tokenizer", str(TINY / "target"),
                 "--fallback", f"hf:{TINY / 'retain'}", "--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE",
                 "--out", str(tmp_path / "out")], tmp_path / "cache")
    assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-2000:])
    err = r.stderr.strip()
    assert err.count("\n") == 0 and err.startswith("evaldag: error: --model-arg fallback=hf:"), err
    assert str(TINY / "retain") in err and f"openai:{target_server.url}/v1" in err and "forget_Q_A_Prob" in err
    assert "greedy answers differ on 100%" in err, err
    assert not (tmp_path / "out").exists() and not nodes_stored(tmp_path / "cache")


def test_the_same_weights_as_fallback_give_hfs_numbers_and_say_who_served_them(target_server, hf_target, tmp_path):
    out = tmp_path / "out"
    r = evaldag(["--model", f"openai:{target_server.url}/v1", "--tokenizer", str(TINY / "target"),
                 "--fallback", f"hf:{TINY / 'target'}", "--metrics", "forget_Q_A_Prob,retain_Q_A_Prob,forget_Q_A_ROUGE",
                 "--out", str(out)], tmp_path / "cache")
    assert r.returncode == 0, r.stderr[-2000:]
    got, server, local = evals(out), f"openai:{target_server.url}/v1", f"hf:{TINY / 'target'}"
    for name in ("forget_Q_A_Prob", "retain_Q_A_Prob", "forget_Q_A_ROUGE"):
        assert abs(got[name]["agg_value"] - hf_target[name]["agg_value"]) <= 1e-6, name
        assert "served_by" not in hf_target[name]  # a run without a fallback keeps its plain shape
    assert got["forget_Q_A_Prob"]["served_by"] == {"model": local}
    assert got["forget_Q_A_ROUGE"]["served_by"] == {"model": server}
    summary = json.loads((out / "TOFU_SUMMARY.json").read_text())
    assert summary["forget_Q_A_Prob"] == got["forget_Q_A_Prob"]["agg_value"]  # the number stays a number
    assert summary["served_by"]["forget_Q_A_Prob"] == {"model": local}
    assert summary["served_by"]["forget_Q_A_ROUGE"] == {"model": server}
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith("  ")}
    assert lines["forget_Q_A_Prob"].endswith(f"served by {local}") and lines["forget_Q_A_ROUGE"].endswith(f"served by {server}")
    assert f"served by {local}" in (out / "report.html").read_text()
    proof = json.loads((out / "run.json").read_text())["provenance"]["fallback_proof"]["model"]
    assert proof["by"] == "greedy" and proof["gap"] == 0.0 and proof["rows"] == 16, proof


@pytest.fixture(scope="module")
def other_weights(tmp_path_factory, server_model):
    """The server model's tokenizer over other weights (seed 1)."""
    return build_tiny_llama(tmp_path_factory.mktemp("other-weights"), weights_seed=1)[0]


def test_vllm_server_keeps_what_it_can_compute_and_refuses_other_weights(server_model, vllm_server, other_weights, tmp_path):
    mdir, tdir = server_model
    server, key = f"openai:{vllm_server.url}/v1", {"OPENAI_API_KEY": VLLM_KEY}
    base = ["--model", server, "--tokenizer", str(tdir), "--served-model", vllm_server.served,
            "--metrics", "forget_Q_A_Prob,mia_min_k_plus_plus"]
    bad = evaldag([*base, "--fallback", f"hf:{other_weights}", "--out", str(tmp_path / "bad")], tmp_path / "c1", **key)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr[-2000:]
    assert f"--model-arg fallback=hf:{other_weights} is not the model {server}" in bad.stderr and "mean token log-prob" in bad.stderr
    assert not (tmp_path / "bad").exists() and not nodes_stored(tmp_path / "c1")

    good = evaldag([*base, "--fallback", f"hf:{mdir}", "--out", str(tmp_path / "good")], tmp_path / "c2", **key)
    assert good.returncode == 0, good.stderr[-2000:]
    ref = evaldag(["--model", f"hf:{mdir}", "--metrics", "forget_Q_A_Prob,mia_min_k_plus_plus",
                   "--out", str(tmp_path / "hf")], tmp_path / "c3")
    assert ref.returncode == 0, ref.stderr[-2000:]
    got, want = evals(tmp_path / "good"), evals(tmp_path / "hf")
    assert got["forget_Q_A_Prob"]["served_by"] == {"model": server}  # not moved by Min-K%++'s need
    assert got["mia_min_k_plus_plus"]["served_by"] == {"model": f"hf:{mdir}"}
    assert abs(got["forget_Q_A_Prob"]["agg_value"] - want["forget_Q_A_Prob"]["agg_value"]) <= 1e-6
    assert got["mia_min_k_plus_plus"]["agg_value"] == want["mia_min_k_plus_plus"]["agg_value"]
    proof = json.loads((tmp_path / "good" / "run.json").read_text())["provenance"]["fallback_proof"]["model"]
    assert proof["by"] == "log-probs" and proof["gap"] <= LOGPROB_TOLERANCE / 100, proof


def test_vllm_model_with_another_folders_weights_is_refused_before_any_engine_starts(server_model, other_weights, tmp_path):
    """``vllm:DIR --fallback hf:OTHER``: both read weight files, so their digests decide; the
    refusal comes before an engine starts (no vLLM log line) and stores nothing."""
    from .test_vllm_backend import vllm_python

    mdir, _ = server_model
    r = subprocess.run([str(vllm_python()), "-m", "evaldag.engine.cli", "run", "tofu", "--model", f"vllm:{mdir}",
                        "--fallback", f"hf:{other_weights}", "--tofu-data", str(TOFU_TINY), "--metrics",
                        "forget_Q_A_Prob,mia_min_k_plus_plus", "--cache-dir", str(tmp_path / "cache"),
                        "--out", str(tmp_path / "out"), "--no-progress"],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-2000:])
    assert r.stderr.strip().splitlines() == [
        f"evaldag: error: --model-arg fallback=hf:{other_weights} is not the model vllm:{mdir}: their weight files differ "
        f"(sha256 {r.stderr.split('sha256 ')[1][:12]} vs {r.stderr.split(' vs ')[1][:12]}); give the fallback a copy of the same weights"]
    assert not (tmp_path / "out").exists() and not nodes_stored(tmp_path / "cache")
