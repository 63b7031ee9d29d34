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


def test_plan_only_counts_the_tokens_shared_question_prefixes_forward(tmp_path):
    """With shared prefixes on (the default) a question's context goes through the model once for
    its seven answers: the plan counts those tokens, the ones the run forwards, not each pair whole."""
    args = ["run", "tofu", "--model", FIX / "tiny-llama" / "target", "--data", FIX / "tofu_tiny", "--limit", "5",
            "--metrics", "forget_Q_A_Prob,forget_truth_ratio,mia_loss"]
    for sharing, tokens in [("on", 730), ("off", 1325)]:
        out, cache = tmp_path / f"out-{sharing}", tmp_path / f"cache-{sharing}"
        plan = run_cli([*args, "--prefix-sharing", sharing, "--plan-only", "--out", out, "--cache-dir", cache])
        assert plan.returncode == 0, plan.stderr
        line = next(x for x in plan.stdout.splitlines() if x.split()[:1] == ["token_stats"])
        assert line.split(";")[0].split() == ["token_stats", "40", "sequences,", str(tokens), "tokens"], (sharing, line)
        run = run_cli([*args, "--prefix-sharing", sharing, "--quiet", "--out", out, "--cache-dir", cache])
        assert run.returncode == 0, run.stderr
        ex = json.loads((out / "run.json").read_text())["executor"]["by_kind"]["token_stats"]
        assert (ex["sequences_forwarded"], ex["tokens_real"]) == (40, tokens)  # the plan's count is the run's
