"""``evaldag metaeval``: faithfulness AUC over a labelled pool (against sklearn and by hand, ties
one half, direction from the declared knowledge form), refusals and flags on small pools, and
robustness over the pool's unlearned checkpoints after the filtering step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from evaldag.engine import cli
from evaldag.engine.metaeval import auc_ties_half, best_threshold


def _folder(path: Path, values: dict) -> Path:
    path.mkdir(parents=True)
    evals = {k: {"agg_value": v} for k, v in values.items()}
    (path / "TOFU_EVAL.json").write_text(json.dumps(evals))
    (path / "TOFU_SUMMARY.json").write_text(json.dumps(values))
    (path / "run.json").write_text(json.dumps({"nodes": {}, "benchmarks": ["tofu"], "provenance": {}}))
    return path


def test_auc_against_sklearn_and_hand_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        pos, neg = np.round(rng.normal(0.3, 1, 9), 1), np.round(rng.normal(0, 1, 7), 1)  # rounded: many ties
        y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
        assert auc_ties_half(pos, neg) == pytest.approx(roc_auc_score(y, np.r_[pos, neg]), abs=1e-15)
    # by hand: pairs (1,2) loss, (1,0) win, (2,2) tie x2, (2,0) win x2 -> (3 + 2 * 1/2) / 6
    assert auc_ties_half([1, 2, 2], [2, 0]) == pytest.approx(4 / 6)
    assert auc_ties_half([1, 1], [1, 1]) == 0.5
    # midpoints 0.4 and 0.775 are both 4/5 accurate: the first from below is kept (0.725 is 3/5)
    assert best_threshold([0.8, 0.9, 0.7], [0.1, 0.75]) == pytest.approx(0.4)
    assert best_threshold([0.5], [0.5]) is None


@pytest.fixture
def pool(tmp_path):
    rng = np.random.default_rng(5)
    knows, nots = [], []
    for i in range(12):
        knows.append(_folder(tmp_path / f"k{i}", {
            "forget_Q_A_Prob": float(rng.uniform(0.5, 0.9)), "forget_truth_ratio": float(rng.uniform(0.3, 0.7)),
            "mia_min_k": float(rng.choice([0.1, 0.95])), "model_utility": 0.6, "forget_Q_A_ROUGE": float(rng.uniform(0, 0.2))}))
        nots.append(_folder(tmp_path / f"n{i}", {
            "forget_Q_A_Prob": float(rng.uniform(0.1, 0.6)), "forget_truth_ratio": float(rng.uniform(0.6, 0.9)),
            "mia_min_k": float(rng.uniform(0.45, 0.55)), "model_utility": 0.6, "forget_Q_A_ROUGE": float(rng.uniform(0.5, 0.9))}))
    return knows, nots


def _faith(tmp_path, knows, nots, *extra):
    out = tmp_path / "m.json"
    pool = (["--knows", *map(str, knows)] if knows else []) + (["--not-knows", *map(str, nots)] if nots else [])
    assert cli.main(["metaeval", *pool, "--seed", "2", "--bootstrap-resamples", "500", "--to", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_faithfulness_in_the_declared_direction(tmp_path, pool):
    knows, nots = pool
    d = _faith(tmp_path, knows, nots)
    f = d["faithfulness"]

    def sk(metric, form):
        vals = [form(json.loads((p / "TOFU_SUMMARY.json").read_text())[metric]) for p in knows + nots]
        return roc_auc_score([1] * len(knows) + [0] * len(nots), vals)

    assert f["TOFU/forget_Q_A_Prob"]["auc"] == pytest.approx(sk("forget_Q_A_Prob", lambda x: x), abs=1e-15)
    assert f["TOFU/forget_truth_ratio"]["auc"] == pytest.approx(sk("forget_truth_ratio", lambda x: 1 - x), abs=1e-15)
    assert f["TOFU/forget_truth_ratio"]["auc"] > 0.9  # high truth ratio = forgotten: flipped by its declaration
    assert f["TOFU/mia_min_k"]["auc"] == pytest.approx(sk("mia_min_k", lambda x: abs(x - 0.5)), abs=1e-15) == 1.0
    # a metric that separates the wrong way is reported as it is, never as max(AUC, 1 - AUC)
    assert f["TOFU/forget_Q_A_ROUGE"]["auc"] == 0.0
    lo, hi = f["TOFU/forget_Q_A_Prob"]["interval"]
    assert lo < f["TOFU/forget_Q_A_Prob"]["auc"] < hi and f["TOFU/forget_Q_A_Prob"]["n"] == {"knows": 12, "does-not-know": 12}
    assert f["TOFU/model_utility"]["refused"].startswith("model_utility: declares no knowledge form")
    assert "flag" not in f["TOFU/forget_Q_A_Prob"]
    # the same pool through a labels file gives the same numbers
    labels = tmp_path / "labels.txt"
    labels.write_text("# pool\n" + "".join(f"knows {p}\n" for p in knows) + "".join(f"does-not-know {p}\n" for p in nots))
    d2 = _faith(tmp_path, [], [], "--labels", str(labels))
    assert d2["faithfulness"] == f


def test_small_pools_are_flagged_or_refused(tmp_path, pool):
    knows, nots = pool
    f = _faith(tmp_path, knows[:3], nots[:4])["faithfulness"]["TOFU/forget_Q_A_Prob"]
    assert f["auc"] is not None and f["flag"].startswith("small pool: fewer than 10 models in a class")
    f = _faith(tmp_path, knows[:1], nots[:4])["faithfulness"]["TOFU/forget_Q_A_Prob"]
    assert f["auc"] is None and f["refused"] == ("forget_Q_A_Prob: 1 knows and 4 does-not-know models with a value; "
                                                 "faithfulness needs 2 or more per class")


def test_robustness_over_the_unlearned_after_filtering(tmp_path, pool):
    knows, nots = pool
    unl = []
    # before -> after quantization of forget_Q_A_Prob; the last one still knows (0.95 is above the pool's threshold)
    cases = [(0.2, 0.4), (0.3, 0.3), (0.1, 0.5), (0.95, 0.97)]
    for i, (b, a) in enumerate(cases):
        u = _folder(tmp_path / f"u{i}", {"forget_Q_A_Prob": b, "model_utility": 0.6 - 0.2 * (i == 2)})
        _folder(u / "attacks" / "quantize-nf4", {"forget_Q_A_Prob": a, "model_utility": 0.6})
        unl.append(u)
    d = _faith(tmp_path, knows, nots, "--unlearned", *map(str, unl))
    r = d["robustness"]["TOFU/forget_Q_A_Prob"]
    assert r["threshold"] == d["faithfulness"]["TOFU/forget_Q_A_Prob"]["threshold"] < 0.95
    assert r["dropped"] == {"still_knows": [str(unl[3])]} and r["kept"] == 3
    q = r["attacks"]["quantize-nf4"]
    assert q["value"] == pytest.approx(np.mean([0.5, 1.0, 0.2]), abs=1e-15) and q["n_models"] == 3
    assert q["interval"][0] <= q["value"] <= q["interval"][1]
    # the utility filter, as a named parameter: u2 lost a third of the reference's utility
    d = _faith(tmp_path, knows, nots, "--unlearned", *map(str, unl), "--utility-drop", "0.2", "--utility-reference", str(knows[0]))
    r = d["robustness"]["TOFU/forget_Q_A_Prob"]
    assert r["dropped"] == {"utility": [str(unl[2])], "still_knows": [str(unl[3])]}
    assert r["attacks"]["quantize-nf4"]["value"] == pytest.approx(0.75)
    assert d["filtering"]["utility_drop"] == 0.2


def test_bad_input(tmp_path, pool, capsys):
    knows, nots = pool
    assert cli.main(["metaeval", "--knows", str(knows[0])]) == 2
    assert "a pool needs both classes" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text(f"knows {knows[0]}\nmaybe {nots[0]}\n")
    assert cli.main(["metaeval", "--labels", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evaldag: error: {bad}:2: expected 'knows PATH' or 'does-not-know PATH'") and len(err.splitlines()) == 1
    assert cli.main(["metaeval", "--knows", str(knows[0]), "--not-knows", str(nots[0]), "--utility-drop", "0.2"]) == 2
    assert "--utility-drop needs --utility-reference" in capsys.readouterr().err
    # one model in both classes (here the same folder twice) is refused, naming it
    assert cli.main(["metaeval", "--knows", str(knows[0]), str(nots[0]), "--not-knows", str(nots[0])]) == 2
    err = capsys.readouterr().err
    assert err == f"evaldag: error: {Path(nots[0]).resolve()} is in both classes (--knows and --not-knows)\n"


def test_report_table(tmp_path, pool):
    knows, nots = pool
    _faith(tmp_path, knows, nots)
    html = (tmp_path / "m.html").read_text()
    assert "faithfulness AUC" in html and "TOFU/forget_truth_ratio" in html and "declares no knowledge form" in html


def test_adding_a_metric_to_a_warm_pool_forwards_only_its_requests(tmp_path):
    """The pool is a sweep (every intermediate cached): one more metric asks the models only for
    what it needs itself (here ROUGE's generations), and the meta-evaluation then has it."""
    from ..inprocess import run_cli

    fix = Path(__file__).resolve().parents[1] / "fixtures"
    models = [str(fix / "tiny-llama" / m) for m in ("target", "retain")]

    def sweep(metrics):
        proc = run_cli(["run", "tofu", *[a for m in models for a in ("--model", m)], "--data", fix / "tofu_tiny",
                        "--limit", "4", "--metrics", metrics, "--quiet", "--out", tmp_path / "pool", "--cache-dir", tmp_path / "cache"])
        assert proc.returncode == 0, proc.stderr
        return {m: json.loads((tmp_path / "pool" / Path(m).name / "run.json").read_text())["executor"] for m in models}

    cold = sweep("forget_Q_A_Prob,forget_truth_ratio")
    assert all(e["sequences_forwarded"] > 0 and "generate" not in e["by_kind"] for e in cold.values())
    warm = sweep("forget_Q_A_Prob,forget_truth_ratio,forget_Q_A_ROUGE")
    for e in warm.values():
        assert e["by_kind"]["generate"]["sequences_forwarded"] == 4  # the new metric's 4 generations
        assert set(e["by_kind"]) == {"generate"}  # the other metrics' nodes are stored: not one token_stats request
        assert e["sequences_forwarded"] == 4
    pool = tmp_path / "pool"
    d = _faith(tmp_path, [pool / "target"], [pool / "retain"], "--min-per-class", "1")
    f = d["faithfulness"]["TOFU/forget_Q_A_ROUGE"]
    assert f["auc"] in (0.0, 0.5, 1.0) and f["interval"] is None and "fewer than 2" in f["reason"]


def test_pool_hm_of_mean_R_and_mean_Q_with_its_interval(tmp_path, pool, capsys):
    knows, nots = pool
    ret = _folder(tmp_path / "ret", {"forget_Q_A_Prob": 0.2})
    _folder(ret / "attacks" / "relearn-forget", {"forget_Q_A_Prob": 0.3})  # D_ret = 0.1
    unl, R, Q = [], [], []
    for i, (b, q_after, r_after) in enumerate([(0.2, 0.4, 0.6), (0.3, 0.3, 0.5), (0.1, 0.5, 0.2), (0.25, 0.5, 0.75)]):
        u = _folder(tmp_path / f"u{i}", {"forget_Q_A_Prob": b})
        _folder(u / "attacks" / "quantize-nf4", {"forget_Q_A_Prob": q_after})
        _folder(u / "attacks" / "relearn-forget", {"forget_Q_A_Prob": r_after})
        unl.append(u)
        Q.append(min(1.0, b / q_after))
        R.append(min(1.0, max(0.0, 0.1 / (r_after - b))))
    d = _faith(tmp_path, knows, nots, "--unlearned", *map(str, unl), "--retain", str(ret), "--no-threshold-filter")
    r = d["robustness"]["TOFU/forget_Q_A_Prob"]
    assert r["kept"] == 4 and r["threshold"] is None
    assert r["attacks"]["relearn-forget"]["value"] == pytest.approx(np.mean(R), abs=1e-15)
    assert r["attacks"]["quantize-nf4"]["value"] == pytest.approx(np.mean(Q), abs=1e-15)
    (hm,) = r["hm"]
    mr, mq = np.mean(R), np.mean(Q)
    assert hm["value"] == pytest.approx(2 * mr * mq / (mr + mq), abs=1e-15)
    assert hm["interval"][0] <= hm["value"] <= hm["interval"][1]
    # the printed table gives each mean with its interval over models, and HM's
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("TOFU/forget_Q_A_Prob ")]
    for cell in (r["attacks"]["relearn-forget"], r["attacks"]["quantize-nf4"], hm):
        lo, hi = cell["interval"]
        assert f"{cell['value']:.3f} [{lo:.3f}, {hi:.3f}]" in line


def test_each_unlearned_runs_own_control_is_its_default(tmp_path, pool):
    """Without --retain, each unlearned run's OUT/control/ (what one --attack run with a retain model
    writes) is its relearning control: here each has its own D_ret, so one shared control would differ."""
    knows, nots = pool
    unl, R = [], []
    for i, (b, r_after, d_ret) in enumerate([(0.2, 0.6, 0.1), (0.3, 0.5, 0.05), (0.1, 0.4, 0.2)]):
        u = _folder(tmp_path / f"u{i}", {"forget_Q_A_Prob": b})
        _folder(u / "attacks" / "relearn-forget", {"forget_Q_A_Prob": r_after})
        _folder(u / "control", {"forget_Q_A_Prob": 0.2})
        _folder(u / "control" / "attacks" / "relearn-forget", {"forget_Q_A_Prob": 0.2 + d_ret})
        unl.append(u)
        R.append(min(1.0, max(0.0, d_ret / (r_after - b))))
    d = _faith(tmp_path, knows, nots, "--unlearned", *map(str, unl), "--no-threshold-filter")
    assert d["controls"] == [str(u / "control") for u in unl]
    assert d["robustness"]["TOFU/forget_Q_A_Prob"]["attacks"]["relearn-forget"]["value"] == pytest.approx(np.mean(R), abs=1e-15)
