"""``evaldag run ... --plan-only``: the model work counted before any of it, nothing loaded or written."""

import json
from pathlib import Path

from evaldag.benchmarks.tofu.data import load_subset
from ..inprocess import run_cli

FIX = Path(__file__).parents[1] / "fixtures"


def test_plan_only_counts_each_kind_and_writes_nothing(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    r = run_cli(["run", "tofu", "--model", FIX / "tiny-llama" / "target", "--data", FIX / "tofu_tiny", "--limit", "5",
                 "--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE,mia_gradnorm", "--max-new-tokens", "16",
                 "--plan-only", "--out", out, "--cache-dir", cache])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("plan: model work on model (") and lines[-1].startswith("plan: before the cache")
    kinds = {x.split()[0]: x for x in lines[1:-1]}
    assert list(kinds) == ["token_stats", "generate", "grad_norm"]  # the order the run serves them
    # 5 forget rows: one answer each to score, one generation each, 5 forget + 5 holdout GradNorm rows
    assert kinds["token_stats"].split()[1] == "5" and kinds["token_stats"].endswith("for forget_Q_A_Prob")
    assert " 5 sequences" in kinds["generate"] and "up to 80 new tokens" in kinds["generate"]
    assert "10 backward passes" in kinds["grad_norm"] and kinds["grad_norm"].endswith("for mia_gradnorm")
    assert not out.exists() and not cache.exists()  # nothing run, nothing written
    # the token count is the encoded rows' (context + answer), as the run will send them
    rows = load_subset(str(FIX / "tofu_tiny"), "forget10_perturbed")[:5]
    assert len(rows) == 5
    full = run_cli(["run", "tofu", "--model", FIX / "tiny-llama" / "target", "--data", FIX / "tofu_tiny", "--limit", "5",
                    "--metrics", "forget_Q_A_Prob", "--quiet", "--out", out, "--cache-dir", cache])
    assert full.returncode == 0, full.stderr
    ex = json.loads((out / "run.json").read_text())["executor"]
    assert f"{ex['tokens_real']} tokens" in kinds["token_stats"]


def test_plan_only_names_the_metric_a_missing_model_is_for(tmp_path):
    """--plan-only refuses a missing model as the run does: naming the metric asked for, not an inner node."""
    r = run_cli(["run", "tofu", "--model", FIX / "tiny-llama" / "target", "--data", FIX / "tofu_tiny", "--limit", "2",
                 "--metrics", "forget_Q_A_Prob,mia_reference", "--plan-only", "--cache-dir", tmp_path / "cache"])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines()[-1] == ("evaldag: error: missing resource(s): 'reference_model' (needed by "
                                         "mia_reference) (pass --reference-model DIR)")
