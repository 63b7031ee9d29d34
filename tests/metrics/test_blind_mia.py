"""mia_blind_baseline: a model-free classifier on the MIAs' own member/non-member rows, seeded and reproducible."""

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
from sklearn.metrics import roc_auc_score  # noqa: E402

from evaldag.engine import Rows, run  # noqa: E402
from evaldag.metrics.unlearning.blind_mia import blind_scores, mia_blind_baseline  # noqa: E402

from ..inprocess import run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny-llama"
TOFU = ROOT / "tests" / "fixtures" / "tofu_tiny"


def _texts(n: int, words: range, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(50)]
    return [" ".join(rng.choice(vocab, size=int(rng.choice(words)))) for _ in range(n)]


def test_a_length_shift_is_found_without_any_model():
    """Members of 20-30 words, non-members of 2-5: length alone separates them, every fold."""
    members, nonmembers = _texts(12, range(20, 31), 0), _texts(12, range(2, 6), 1)
    for features in ("length", "bow+length"):
        scores, labels, k = blind_scores(members, nonmembers, features, folds=5, seed=0)
        assert k == 5 and labels.tolist() == [0] * 12 + [1] * 12
        assert roc_auc_score(labels, scores) == 1.0


def test_seeded_and_reproducible():
    members, nonmembers = _texts(15, range(5, 12), 2), _texts(15, range(5, 12), 3)
    a, _, _ = blind_scores(members, nonmembers, seed=7)
    b, _, _ = blind_scores(members, nonmembers, seed=7)
    c, _, _ = blind_scores(members, nonmembers, seed=8)
    assert a.tolist() == b.tolist()  # bit for bit
    assert a.tolist() != c.tolist()  # another seed, other folds


def test_node_compares_each_mia_parent(cache_dir):
    """Without MIA parents: the blind AUC alone, the folds capped by the smaller side."""
    members = [{"answer": t} for t in _texts(3, range(20, 31), 4)]
    nonmembers = [{"answer": t} for t in _texts(6, range(2, 6), 5)]
    res = run([mia_blind_baseline(name="blind", features="length", bind={"members": "m", "nonmembers": "n"})],
              {"m": Rows(lambda: members), "n": Rows(lambda: nonmembers)}, cache_dir=str(cache_dir))
    got = res["blind"].to_dict()
    assert got == {"features": "length", "folds": 3, "seed": 0, "members": 3, "nonmembers": 6, "agg_value": 1.0}


def test_tofu_writes_it_beside_the_mias_and_the_report_says_which_do_not_beat_it(tmp_path, cache_dir):
    args = ["run", "tofu", "--model", TINY / "target", "--data", TOFU, "--metrics", "mia_loss,mia_min_k,forget_Q_A_Prob",
            "--mia-blind-baseline", "--limit", "6", "--cache-dir", cache_dir, "--quiet"]
    r = run_cli([*args, "--out", tmp_path / "a"])
    assert r.returncode == 0, r.stderr
    evals = json.loads((tmp_path / "a" / "TOFU_EVAL.json").read_text())
    b = evals["mia_blind_baseline"]
    assert b["mia_auc"] == {m: evals[m]["agg_value"] for m in ("mia_loss", "mia_min_k")}
    assert sorted(b["beaten_by"] + b["not_beaten_by"]) == ["mia_loss", "mia_min_k"]
    assert b["beaten_by"] == [m for m in ("mia_loss", "mia_min_k") if evals[m]["agg_value"] > b["agg_value"]]
    assert (b["members"], b["nonmembers"], b["folds"], b["seed"]) == (6, 6, 5, 0)
    summary = json.loads((tmp_path / "a" / "TOFU_SUMMARY.json").read_text())
    assert summary["mia_blind_baseline"] == b["agg_value"]
    # the tiny fixture's forget and holdout rows differ in wording: bag of words alone separates them
    # (AUC 1), and an MIA that only ties the blind baseline does not beat it
    assert (b["agg_value"], b["not_beaten_by"], evals["mia_loss"]["agg_value"]) == (1.0, ["mia_loss", "mia_min_k"], 1.0)
    assert summary["notes"] == {"mia_blind_baseline": "mia_loss (AUC 1), mia_min_k (AUC 1) do not beat the blind baseline (AUC 1)"}
    html = (tmp_path / "a" / "report.html").read_text()
    assert "Blind MIA baseline" in html and html.count(">does not beat it</td>") == len(b["not_beaten_by"])
    # the same rows and seed in a fresh cache: the same number; another seed: recorded
    r2 = run_cli([*args[:-3], "--cache-dir", tmp_path / "c2", "--quiet", "--out", tmp_path / "b"])
    assert r2.returncode == 0, r2.stderr
    assert json.loads((tmp_path / "b" / "TOFU_EVAL.json").read_text())["mia_blind_baseline"] == b
    r3 = run_cli([*args, "--seed", "3", "--out", tmp_path / "s3"])
    assert json.loads((tmp_path / "s3" / "TOFU_EVAL.json").read_text())["mia_blind_baseline"]["seed"] == 3


def test_without_sklearn_it_is_a_stated_skip(tmp_path, cache_dir, monkeypatch):
    import evaldag.benchmarks.unlearning.benchmark as bench

    monkeypatch.setattr(bench, "sklearn_missing", lambda: True)
    r = run_cli(["run", "tofu", "--model", TINY / "target", "--data", TOFU, "--metrics", "mia_loss", "--mia-blind-baseline",
                 "--limit", "4", "--cache-dir", cache_dir, "--quiet", "--out", tmp_path / "o"])
    assert r.returncode == 0, r.stderr
    assert "evaldag: note: TOFU: mia_blind_baseline skipped: scikit-learn is not installed (pip install 'evaldag[sklearn]')" in r.stderr
    assert set(json.loads((tmp_path / "o" / "TOFU_EVAL.json").read_text())) == {"mia_loss"}
