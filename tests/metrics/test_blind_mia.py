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


def _hand_pipeline(members: list[str], nonmembers: list[str], seed: int) -> float:
    """The documented classifier written out with scikit-learn alone: word 1-2-gram counts and the
    length in characters and words (standardised on the training fold), a logistic regression,
    out-of-fold scores from a shuffled stratified 5-fold, AUC with non-members positive."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    texts, y = members + nonmembers, np.array([0] * len(members) + [1] * len(nonmembers))
    size = np.array([[len(t), len(t.split())] for t in texts], dtype=float)
    p = np.empty(len(texts))
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=seed).split(texts, y):
        bow = CountVectorizer(ngram_range=(1, 2)).fit([texts[i] for i in tr])
        mu, sd = size[tr].mean(0), size[tr].std(0)
        sd[sd == 0] = 1.0
        x = lambda idx: hstack([bow.transform([texts[i] for i in idx]), csr_matrix((size[idx] - mu) / sd)]).tocsr()  # noqa: E731
        p[te] = LogisticRegression(max_iter=1000, random_state=seed).fit(x(tr), y[tr]).predict_proba(x(te))[:, 1]
    return float(roc_auc_score(y, p))


def test_muse_blind_baseline_equals_a_hand_run_pipeline_on_the_privleak_rows(tmp_path, cache_dir):
    """MUSE: the privleak forget (members) and holdout (non-members) texts, --limit 12, --seed 4."""
    muse = ROOT / "tests" / "fixtures" / "muse_tiny"
    r = run_cli(["run", "muse", "--model", TINY / "target", "--data", muse, "--metrics", "mia_loss,mia_zlib,privleak",
                 "--mia-blind-baseline", "--limit", "12", "--seed", "4", "--cache-dir", cache_dir, "--quiet", "--out", tmp_path / "m"])
    assert r.returncode == 0, r.stderr
    evals = json.loads((tmp_path / "m" / "MUSE_EVAL.json").read_text())
    b = evals["mia_blind_baseline"]
    read = lambda f: [json.loads(line)["text"] for line in (muse / f).read_text().splitlines()[:12]]  # noqa: E731
    members, nonmembers = read("privleak_forget.json"), read("privleak_holdout.json")
    want = _hand_pipeline(members, nonmembers, seed=4)
    assert b["agg_value"] == want  # exact: the same pipeline, the same folds
    assert (b["members"], b["nonmembers"], b["folds"], b["seed"], b["features"]) == (12, 12, 5, 4, "bow+length")
    assert b["mia_auc"] == {m: evals[m]["agg_value"] for m in ("mia_loss", "mia_zlib")}  # privleak is no MIA parent
    assert b["beaten_by"] == [m for m in ("mia_loss", "mia_zlib") if evals[m]["agg_value"] > max(want, 0.5)]
    assert _hand_pipeline(members, nonmembers, seed=5) != want  # the seed matters: it is recorded, not implied


@pytest.mark.parametrize("mia,blind,verdict", [
    (0.7, 0.7, False),            # a tie does not beat
    (0.7000001, 0.7, True),       # strictly greater does
    (0.5, 0.3, False),            # chance never beats, even a below-chance baseline
    (0.45, 0.3, False),           # nor does a below-chance AUC: its direction is not membership's
    (0.5000001, 0.3, True),
    (0.3, 0.7, False),            # never flipped to 1 - AUC
    (float("nan"), 0.6, False), (None, 0.6, False),
])
def test_beats_is_the_oriented_auc_strictly_above_the_baseline_and_chance(mia, blind, verdict):
    from evaldag.metrics.unlearning.blind_mia import beats

    assert beats(mia, blind) is verdict

