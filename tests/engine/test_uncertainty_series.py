"""Cluster bootstrap over seeds x items, and paired tests along a series of runs (a sweep)."""

import itertools

import numpy as np
import pytest
from scipy import stats

from evaldag.engine.uncertainty import Sample, cluster_interval, interval, paired, paired_series


def _mean_sample(values, keys=None):
    values = np.asarray(values, dtype=np.float64)
    keys = tuple(keys or (str(i) for i in range(len(values))))
    return Sample(("items",), (keys,), (values,), lambda x: float(np.mean(x)))


M = np.array([[0.10, 0.40, 0.35, 0.80, 0.20, 0.55],
              [0.30, 0.45, 0.50, 0.90, 0.25, 0.60],
              [0.05, 0.20, 0.30, 0.70, 0.10, 0.40]])


def test_cluster_interval_resamples_seeds_and_items_as_scipy_does():
    out = cluster_interval([_mean_sample(row) for row in M], 500, 7)
    # by hand: seeds and items drawn independently (a crossed design), the mean over the drawn cells
    ref = stats.bootstrap((np.arange(3), np.arange(6)), lambda s, i: float(M[np.ix_(s, i)].mean()), vectorized=False,
                          n_resamples=500, method="percentile", rng=np.random.default_rng(7))
    assert out["value"] == pytest.approx(M.mean(axis=1).mean(), abs=1e-15)
    assert out["percentile"] == pytest.approx(list(ref.confidence_interval), rel=1e-12)
    assert out["se"] == pytest.approx(float(np.std(ref.bootstrap_distribution, ddof=1)), rel=1e-12)
    assert out["n_items"] == {"seeds": 3, "items": 6}
    assert out["per_seed"] == pytest.approx(list(M.mean(axis=1)))
    assert out["between_seeds_sd"] == pytest.approx(float(np.std(M.mean(axis=1), ddof=1)))


def test_seed_variance_widens_the_interval():
    shifted = M + np.array([[0.0], [0.3], [-0.3]])  # three seeds far apart, the same item spread
    pooled = cluster_interval([_mean_sample(row) for row in shifted], 500, 0)
    items_only = interval(_mean_sample(shifted.mean(axis=0)), 500, 0)
    assert pooled["percentile"][1] - pooled["percentile"][0] > 2 * (items_only["percentile"][1] - items_only["percentile"][0])


def test_cluster_interval_keeps_the_items_every_seed_scored():
    a = _mean_sample([1.0, 2.0, 3.0, 4.0], ["a", "b", "c", "d"])
    b = _mean_sample([2.0, 9.0, 4.0], ["a", "x", "c"])
    out = cluster_interval([a, b], 200, 0)
    assert out["n_items"] == {"seeds": 2, "items": 2} and out["unpaired_items"] == {"items": 3}
    assert out["value"] == pytest.approx(((1 + 3) / 2 + (2 + 4) / 2) / 2)


def test_one_seed_is_the_item_interval():
    one = cluster_interval([_mean_sample(M[0])], 300, 2)
    assert one["percentile"] == interval(_mean_sample(M[0]), 300, 2)["percentile"]
    assert one["n_items"] == {"seeds": 1, "items": 6}


def test_paired_series_against_previous_and_first_with_holm():
    runs = {"step-1": _mean_sample(M[0]), "step-2": _mean_sample(M[1]), "step-3": _mean_sample(M[2])}
    prev = paired_series(runs, against="previous", n_resamples=200, seed=1)
    assert [(r["a_run"], r["b_run"]) for r in prev] == [("step-1", "step-2"), ("step-2", "step-3")]
    first = paired_series(runs, against="first", n_resamples=200, seed=1)
    assert [(r["a_run"], r["b_run"]) for r in first] == [("step-1", "step-2"), ("step-1", "step-3")]
    # 6 items: the sign-flip test is exact over 2**6 swaps
    d = M[1] - M[0]
    by_hand = sum(abs(np.sum(d * s)) >= abs(d.sum()) - 1e-12 for s in itertools.product((1, -1), repeat=6)) / 64
    assert prev[0]["p_value"] == pytest.approx(by_hand) and prev[0]["exact"]
    assert prev[0]["delta"] == pytest.approx(paired(runs["step-1"], runs["step-2"], 200, 1)["delta"])
    ps = sorted(r["p_value"] for r in prev)
    assert sorted(r["p_holm"] for r in prev) == pytest.approx([min(1.0, 2 * ps[0]), max(min(1.0, 2 * ps[0]), ps[1])])
    assert all("p_bh" in r and r["verdict"] for r in prev)


def test_paired_series_rejects_an_unknown_order():
    with pytest.raises(ValueError, match="against"):
        paired_series({"a": _mean_sample(M[0]), "b": _mean_sample(M[1])}, against="last")


def test_items_needed_for_the_observed_difference():
    a, b = _mean_sample(M[0]), _mean_sample(M[2])
    row = paired(a, b, 400, 3)
    # the standard error falls as 1/sqrt(n): the items at which the minimum detectable difference reaches |B - A|
    assert row["items_needed"] == int(np.ceil(6 * (row["mde"] / abs(row["delta"])) ** 2))
    assert paired(a, a, 100, 0)["items_needed"] is None  # no difference: no number of items finds it


def test_pooled_against_a_single_run_resamples_only_the_pool_and_the_items():
    from evaldag.engine.uncertainty import pooled_paired

    out = pooled_paired([_mean_sample(M[0])], [_mean_sample(r) for r in M], 300, 4)
    ref = stats.bootstrap((np.arange(3), np.arange(6)), lambda s, i: float(M[np.ix_(s, i)].mean() - M[0, i].mean()),
                          vectorized=False, n_resamples=300, method="percentile", rng=np.random.default_rng(4))
    assert out["percentile"] == pytest.approx(list(ref.confidence_interval), rel=1e-12)
    assert out["n_items"] == {"seeds A": 1, "seeds B": 3, "items": 6} and out["between_seeds_sd"]["a"] is None
    assert out["a_interval"] == cluster_interval([_mean_sample(M[0])], 300, 4)["percentile"]
    assert out["b_interval"] == cluster_interval([_mean_sample(r) for r in M], 300, 4)["percentile"]
