"""Comparing evaldag's fairness results with WEFE's recorded outputs (shared by the
math tests and the graph tests)."""

from __future__ import annotations

import math
from typing import Any

# WEFE works on float32 vectors, and a float32 reduction rounds differently on CPUs whose
# SIMD kernels differ (the references were recorded on an AVX-512 machine; on an AVX2-only
# EPYC the worst of the 373 cases, a WEAT effect size of 1.0965, moved by 1.25e-6). The
# bound is float32 rounding of values near 1, not a looser claim about the formulas:
# every other case stays within 1e-6, and a formula error moves results by far more.
FLOAT32_ATOL = 2e-6
RNSB_ATOL = 1e-4  # RNSB trains a classifier: the brief's bound
# RNSB's liblinear replay (metrics/fairness/logistic.py) against sklearn's liblinear: both float64,
# but liblinear sums in plain C loops and the replay in numpy's BLAS, whose summation order
# depends on the numpy/scipy build; TRON's early stop carries those last bits into the weights.
# Measured: 3.3e-16 here (numpy 2.4.6, scipy-openblas 0.3.31); up to 4.7e-8 was seen on another build. The bound
# is 2x that, still 300x below the true optimum's distance (3e-5): docs/gotchas.md. The fidelity
# comparisons of seeded RNSB runs (tests/fidelity/test_wefe_compat.py) keep their own bounds.
LIBLINEAR_ATOL = 1e-7

# WEFE's per-word dicts: their key order is part of the result
PER_WORD = ("distance_by_word", "negative_sentiment_probabilities", "negative_sentiment_distribution",
            "targets_eval", "word_values")


def worst_diff(ours: Any, ref: Any, path: str = "", *, same_keys_order: bool = False, none_ok: bool = False) -> float:
    """Max |ours - ref| over ref's numbers. Every key of ref must be in ours; in a per-word
    dict ref's keys keep their order in ours (``same_keys_order``: ours has exactly ref's
    keys, in that order). WEFE writes NaN as null: ours must be NaN there (or None, with
    ``none_ok``). Strings compare equal."""
    if isinstance(ref, dict):
        assert isinstance(ours, dict), path
        missing = [k for k in ref if k not in ours]
        assert not missing, f"{path}: missing {missing}"
        if path.rsplit("/", 1)[-1] in PER_WORD:
            got = list(ours) if same_keys_order else [k for k in ours if k in ref]
            assert got == list(ref), f"{path}: key order differs from WEFE's"
        return max((worst_diff(ours[k], ref[k], f"{path}/{k}", same_keys_order=same_keys_order, none_ok=none_ok)
                    for k in ref), default=0.0)
    if ref is None:
        assert (none_ok and ours is None) or (isinstance(ours, float) and math.isnan(ours)), (path, ours)
        return 0.0
    if isinstance(ref, str):
        assert ours == ref, (path, ours, ref)
        return 0.0
    assert not math.isnan(ours), path
    return abs(ours - ref)
