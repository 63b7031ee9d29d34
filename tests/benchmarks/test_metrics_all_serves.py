"""``--metrics all`` is every metric this run's resources can serve: what it leaves out is said in
one stderr line, with what serves each; a metric named outright that cannot be served is refused."""

from __future__ import annotations

import json
from pathlib import Path

from tests.inprocess import run_cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TARGET, RETAIN = FIX / "tiny-llama" / "target", FIX / "tiny-llama" / "retain"


def _notes(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if "--metrics all leaves out" in x]


def _graph(tmp_path, bench, data, *extra):
    r = run_cli(["graph", bench, "--model", TARGET, "--data", data, "--format", "json", "--cache-dir", tmp_path / "c", *extra])
    assert r.returncode == 0, r.stderr
    names = {n.split("/", 1)[1] for v in json.loads(r.stdout)["nodes"] for n in v["names"] if "/" in n}
    return names, r.stderr


def test_all_without_a_retain_or_reference_model_runs_what_it_can_and_says_what_it_left_out(tmp_path):
    cmd = ["run", "tofu", "--model", TARGET, "--data", FIX / "tofu_tiny", "--metrics", "all", "--plan-only",
           "--cache-dir", tmp_path / "c", "--out", tmp_path / "out"]
    r = run_cli(cmd)
    assert r.returncode == 0, r.stderr
    assert _notes(r.stderr) == [
        "evaldag: note: TOFU --metrics all leaves out what this run cannot serve: forget_Q_A_gibberish (needs "
        "--classifier-model), mia_reference (needs --reference-model or --retain-model)"]
    quiet = run_cli([*cmd, "--quiet"])
    assert quiet.returncode == 0 and _notes(quiet.stderr) == []  # --quiet: only errors
    names, err = _graph(tmp_path, "tofu", FIX / "tofu_tiny", "--metrics", "all")
    assert len(_notes(err)) == 1 and "cannot fingerprint" not in err
    assert {"mia_reference", "forget_Q_A_gibberish"}.isdisjoint(names)
    # served without a retain side (no value with its reason, a reference AUC of 0.5): open-unlearning's answer
    assert {"forget_quality", "privleak", "mia_gradnorm", "mia_loss", "model_utility", "forget_truth_ratio"} <= names

    # the retain model is the Reference attack's reference
    names, err = _graph(tmp_path, "tofu", FIX / "tofu_tiny", "--metrics", "all", "--retain-model", RETAIN)
    assert _notes(err) == ["evaldag: note: TOFU --metrics all leaves out what this run cannot serve: forget_Q_A_gibberish "
                           "(needs --classifier-model)"]
    assert {"mia_reference", "forget_quality"} <= names

    names, err = _graph(tmp_path, "muse", FIX / "muse_tiny", "--metrics", "all")
    assert _notes(err) == ["evaldag: note: MUSE --metrics all leaves out what this run cannot serve: forget_gibberish "
                           "(needs --classifier-model), mia_reference (needs --reference-model or --retain-model)"]
    assert "mia_reference" not in names and {"privleak", "mia_min_k"} <= names


def test_a_metric_named_outright_that_cannot_be_served_is_still_refused(tmp_path):
    r = run_cli(["run", "tofu", "--model", TARGET, "--data", FIX / "tofu_tiny", "--metrics", "all,mia_reference", "--plan-only",
                 "--cache-dir", tmp_path / "c", "--out", tmp_path / "out"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == ("evaldag: error: missing resource(s): 'reference_model' (needed by "
                                                 "mia_reference) (pass --reference-model DIR)"), r.stderr
    assert _notes(r.stderr) == ["evaldag: note: TOFU --metrics all leaves out what this run cannot serve: forget_Q_A_gibberish "
                                "(needs --classifier-model)"]
