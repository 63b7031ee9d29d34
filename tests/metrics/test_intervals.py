"""Bootstrap intervals of TOFU/MUSE metrics equal scipy.stats.bootstrap's on the same items and seed;
the paired permutation test equals a hand enumeration."""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from evaldag.engine.uncertainty import Sample, paired, permutation_p
from evaldag.metrics.unlearning.intervals import bracket, ks_p_value, sample_of
from evaldag.metrics.unlearning.mia import auc
from evaldag.metrics.unlearning.truth_ratio import closer_to_1_better

OU = Path(__file__).parents[1] / "fixtures" / "open_unlearning"
TARGET = json.loads((OU / "target_TOFU_EVAL.json").read_text())
RETAIN = json.loads((OU / "retain_TOFU_EVAL.json").read_text())
B, SEED = 400, 7


def _vals(block, field):
    vbi = block["value_by_index"]
    return np.array([np.mean(vbi[k][field]) for k in sorted(vbi, key=int)])


def _scipy(data, statistic, method, paired_=False):
    return stats.bootstrap(data, statistic, n_resamples=B, rng=np.random.default_rng(SEED), method=method,
                           vectorized=False, paired=paired_).confidence_interval


@pytest.mark.parametrize("name,kind,field", [("forget_Q_A_Prob", "mean:prob", "prob"),
                                             ("retain_Q_A_ROUGE", "mean:rougeL_recall", "rougeL_recall"),
                                             ("extraction_strength", "mean:score", "score")])
def test_mean_metrics_equal_scipy(name, kind, field):
    iv = bracket(sample_of(kind, {"metric": TARGET[name]}), B, SEED, 0.95)
    x = _vals(TARGET[name], field)
    assert iv["value"] == pytest.approx(TARGET[name]["agg_value"], rel=1e-12)
    for method, key in (("percentile", "percentile"), ("BCa", "BCa")):
        lo, hi = _scipy((x,), np.mean, method)
        assert iv[key] == pytest.approx([lo, hi], rel=1e-12, abs=1e-15), (name, method)
    assert iv["percentile"][0] < iv["value"] < iv["percentile"][1]


def test_truth_ratio_and_mia_equal_scipy():
    iv = bracket(sample_of("truth_ratio:closer_to_1_better", {"metric": TARGET["forget_truth_ratio"]}), B, SEED, 0.95)
    lo, hi = _scipy((_vals(TARGET["forget_truth_ratio"], "score"),), closer_to_1_better, "percentile")
    assert iv["percentile"] == pytest.approx([lo, hi], rel=1e-12)
    m = RETAIN["mia_min_k"]  # the retain model's AUC is not 1: an interval with width
    iv = bracket(sample_of("auc", {"metric": m}), B, SEED, 0.95)
    f, h = _vals(m["forget"], "score"), _vals(m["holdout"], "score")
    lo, hi = _scipy((f, h), auc, "percentile")  # two samples, each resampled on its own
    assert iv["value"] == pytest.approx(m["agg_value"]) and iv["percentile"] == pytest.approx([lo, hi], rel=1e-12)
    assert hi > lo


def test_forget_quality_interval_is_on_the_ks_statistic():
    s = sample_of("ks", {"forget": TARGET["forget_truth_ratio"], "retain": RETAIN["forget_truth_ratio"]})
    iv = bracket(s, B, SEED, 0.95)
    a, b = _vals(TARGET["forget_truth_ratio"], "score"), _vals(RETAIN["forget_truth_ratio"], "score")
    ks = stats.ks_2samp(a, b)
    assert iv["ks"] == pytest.approx(ks.statistic) and iv["value"] == pytest.approx(ks.pvalue, rel=1e-9)
    assert iv["value"] == pytest.approx(TARGET["forget_quality"]["agg_value"], rel=1e-6)
    lo, hi = _scipy((a, b), lambda x, y: stats.ks_2samp(x, y).statistic, "percentile", paired_=True)
    assert iv["ks_percentile"] == pytest.approx([lo, hi], rel=1e-12)
    assert iv["percentile"] == pytest.approx([ks_p_value(hi, 40, 40), ks_p_value(lo, 40, 40)])
    assert iv["percentile"][0] <= iv["value"] <= iv["percentile"][1]


def test_model_utility_is_stratified_by_split():
    parts = ("retain_Q_A_Prob", "retain_Q_A_ROUGE", "retain_Truth_Ratio", "ra_Q_A_Prob_normalised", "ra_Q_A_ROUGE",
             "ra_Truth_Ratio", "wf_Q_A_Prob_normalised", "wf_Q_A_ROUGE", "wf_Truth_Ratio")
    s = sample_of("hmean", {p: TARGET[p] for p in parts})
    assert s.sizes() == {"retain": 40, "ra": 20, "wf": 24}
    iv = bracket(s, B, SEED, 0.95)
    assert iv["value"] == pytest.approx(TARGET["model_utility"]["agg_value"], rel=1e-9)
    cols = [np.stack([_vals(TARGET[a], "prob"), _vals(TARGET[b], "rougeL_recall"), _vals(TARGET[c], "score")], 1)
            for a, b, c in (parts[0:3], parts[3:6], parts[6:9])]

    def hm(r, ra, wf):
        nine = [v for x in (r, ra, wf) for v in (x[:, 0].mean(), x[:, 1].mean(), np.maximum(0, 1 - x[:, 2]).mean())]
        return stats.hmean(nine)
    idx = tuple(np.arange(len(c)) for c in cols)
    lo, hi = _scipy(idx, lambda *i: hm(*(c[j] for c, j in zip(cols, i))), "percentile")
    assert iv["percentile"] == pytest.approx([lo, hi], rel=1e-12)


def test_privleak_interval_pairs_items_with_the_retain_model():
    iv = bracket(sample_of("privleak", {"forget": RETAIN["mia_min_k"], "retain": TARGET["mia_min_k"]}), B, SEED, 0.95)
    r, t = RETAIN["mia_min_k"]["auc"], TARGET["mia_min_k"]["auc"]
    assert iv["value"] == pytest.approx(((1 - r) - (1 - t)) / (1 - t + 1e-10) * 100)
    assert iv["n_items"] == {"forget": 40, "holdout": 40}
    f = np.stack([_vals(RETAIN["mia_min_k"]["forget"], "score"), _vals(TARGET["mia_min_k"]["forget"], "score")], 1)
    h = np.stack([_vals(RETAIN["mia_min_k"]["holdout"], "score"), _vals(TARGET["mia_min_k"]["holdout"], "score")], 1)

    def pl(i, j):
        s, q = 1 - auc(f[i, 0], h[j, 0]), 1 - auc(f[i, 1], h[j, 1])
        return (s - q) / (q + 1e-10) * 100
    lo, hi = _scipy((np.arange(40), np.arange(40)), pl, "percentile")
    assert iv["percentile"] == pytest.approx([lo, hi], rel=1e-12)


def test_bca_undefined_is_said():
    s = Sample(("items",), (tuple("abcd"),), (np.ones(4),), lambda x: float(np.mean(x)))
    iv = bracket(s, 50, 0, 0.95)
    assert iv["percentile"] == [1.0, 1.0] and iv["BCa"] is None and iv["reason"] == (
        "BCa undefined: every resample gives the same value (a degenerate bootstrap distribution)")


def _mean_sample(x):
    return Sample(("items",), (tuple(str(i) for i in range(len(x))),), (np.asarray(x, float),), lambda v: float(np.mean(v)))


def test_exact_sign_flip_p_value_by_hand():
    a, b = [0.1, 0.4, 0.3, 0.5, 0.2], [0.3, 0.5, 0.2, 0.9, 0.6]
    d = np.subtract(b, a)  # 0.2, 0.1, -0.1, 0.4, 0.4: |sum| 1.0
    hits = sum(abs(np.sum(d * s)) >= abs(d.sum()) - 1e-12 for s in itertools.product((1, -1), repeat=5))
    # |sum| >= 1.0: no flip (1.0), the -0.1 flipped (1.2), the 0.1 and the -0.1 flipped (1.0); and their mirrors
    assert hits == 6
    p, exact, n = permutation_p(_mean_sample(a), _mean_sample(b), 100, 0)
    assert exact and n == 32 and p == pytest.approx(6 / 32, abs=1e-15)
    res = stats.permutation_test((np.array(b), np.array(a)), lambda x, y: np.mean(x - y), permutation_type="samples",
                                 vectorized=False, n_resamples=np.inf)  # scipy's exact paired test agrees
    assert res.pvalue == pytest.approx(p)


def test_paired_comparison_says_inside_the_noise():
    rng = np.random.default_rng(1)
    a = rng.normal(0.5, 0.1, 40)
    same = paired(_mean_sample(a), _mean_sample(a + rng.normal(0, 0.01, 40)), 500, 3)
    assert same["verdict"] == "inside the noise" and not same["exact"]
    moved = paired(_mean_sample(a), _mean_sample(a + 0.05 + rng.normal(0, 0.01, 40)), 500, 3)
    assert moved["verdict"] == "B > A" and moved["p_value"] == pytest.approx(1 / 501)
    b = a + 0.05 + rng.normal(0, 0.01, 40)
    out = paired(_mean_sample(a), _mean_sample(b), 500, 3)  # the paired interval is scipy's on the per-item differences
    lo, hi = stats.bootstrap((b - a,), np.mean, n_resamples=500, rng=np.random.default_rng(3), method="percentile").confidence_interval
    assert out["percentile"] == pytest.approx([lo, hi], rel=1e-9)


def test_muse_rouge_is_the_mean_of_rougeL_f1():
    from evaldag.benchmarks.muse import spec as muse_spec
    from evaldag.benchmarks.tofu import spec as tofu_spec

    muse = json.loads((OU / "target_MUSE_EVAL.json").read_text())
    assert muse_spec.interval_kind("forget_knowmem_ROUGE") == "mean:rougeL_f1"
    assert tofu_spec.interval_kind("forget_Q_A_ROUGE") == "mean:rougeL_recall"
    for name in ("forget_knowmem_ROUGE", "retain_knowmem_ROUGE", "forget_verbmem_ROUGE"):
        iv = bracket(sample_of(muse_spec.interval_kind(name), {"metric": muse[name]}), B, SEED, 0.95)
        assert iv["value"] == pytest.approx(muse[name]["agg_value"], rel=1e-12), name
        lo, hi = _scipy((_vals(muse[name], "rougeL_f1"),), np.mean, "percentile")
        assert iv["percentile"] == pytest.approx([lo, hi], rel=1e-12), name


def test_holm_and_benjamini_hochberg_by_hand():
    from evaldag.engine.uncertainty import benjamini_hochberg, holm

    ps = [0.01, 0.04, None, 0.03, 0.5]  # m = 4
    h, q = holm(ps), benjamini_hochberg(ps)
    assert h[2] is None and q[2] is None
    assert h[:2] + h[3:] == pytest.approx([0.04, 0.09, 0.09, 0.5])  # 4*.01, max(2*.04, .09), max(3*.03, .04), .5
    assert q[:2] + q[3:] == pytest.approx([0.04, 4 * 0.04 / 3, 4 * 0.04 / 3, 0.5])  # 4p/rank, then the running minimum from the top


def test_forget_quality_on_smaller_forget_splits():
    rng = np.random.default_rng(0)
    model, retain = rng.normal(0.0, 1.0, 400), rng.normal(0.3, 1.0, 400)
    keys = tuple(str(i) for i in range(400))
    blocks = {side: {"value_by_index": {k: {"score": float(v)} for k, v in zip(keys, x)}} for side, x in (("forget", model), ("retain", retain))}
    iv = bracket(sample_of("ks", blocks), 100, 2, 0.95)
    assert iv["value"] == pytest.approx(stats.ks_2samp(model, retain).pvalue, rel=1e-9)
    assert set(iv["by_forget_size"]) == {"40", "200"}  # forget01 and forget05 sizes; 400 is the split itself
    small, mid = iv["by_forget_size"]["40"], iv["by_forget_size"]["200"]
    assert small["subsets"] == 100 and small["range"][0] <= small["median"] <= small["range"][1]
    assert iv["value"] < mid["median"] < small["median"]  # the same models: the p-value grows as the split shrinks
    rng2 = np.random.default_rng(2)  # the subsets of 40 again, each p-value from scipy's ks_2samp
    ps = [stats.ks_2samp(model[i], retain[i]).pvalue for i in (rng2.choice(400, 40, replace=False) for _ in range(100))]
    assert small["median"] == pytest.approx(np.median(ps), rel=1e-9)
    assert small["range"] == pytest.approx(list(np.percentile(ps, [2.5, 97.5])), rel=1e-9)
