"""WEAT (Caliskan et al. 2017) as WEFE 1.0.1 computes it, plus honest p-values.

The pieces are separate functions because the graph caches them separately: one
cosine matrix per (target set, attribute set), the association vector
``s(w, A, B) = mean_a cos(w, a) - mean_b cos(w, b)`` per target set, and from those
two vectors the statistic, the effect size and every permutation p-value, none of
which needs another cosine.

Fidelity choices (WEFE 1.0.1):

* the statistic is the *sum* form ``sum_{x in T1} s(x) - sum_{y in T2} s(y)``;
* the effect size divides by the *population* std (ddof=0) of s over T1 + T2;
* cosines are float32 (sklearn on float32 input), averaged in float64.

The p-values (exact, Monte Carlo, WEFE's sampler) are in ``weat_p_value.py``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...engine import Node, Params, Result, metric
from ...engine.declare import MetricDef
from .cosine import cosine_matrix
from .lookup import QueryLookup
from .registry import Build, as_result, check_lookup, fairness_metric, given_by_builder, nan_result
from .weat_p_value import (
    MAX_EXACT_SPLITS,
    P_VALUE_METHODS,
    PValueParams,
    check_test_type,
    n_splits,
    weat_p_value_exact,
    weat_p_value_monte_carlo,
    weat_p_value_node,
    weat_p_value_wefe,
    weat_score,
)
from .word_sets import VERSION, lookup_from_value

__all__ = [
    "WeatOptions", "s_from_cosines", "s_vector", "weat", "weat_effect_size", "weat_p_value_exact",
    "weat_p_value_monte_carlo", "weat_p_value_wefe", "weat_score",
]


def s_from_cosines(cos_a: np.ndarray, cos_b: np.ndarray) -> np.ndarray:
    """s(w, A, B) per target word from its cosine rows against A and B (float64)."""
    return np.mean(cos_a, axis=1, dtype=np.float64) - np.mean(cos_b, axis=1, dtype=np.float64)


def s_vector(targets: np.ndarray, attr_a: np.ndarray, attr_b: np.ndarray) -> np.ndarray:
    """s(w, A, B) for every row of ``targets``."""
    return s_from_cosines(cosine_matrix(targets, attr_a), cosine_matrix(targets, attr_b))


def weat_effect_size(s1: np.ndarray, s2: np.ndarray) -> float:
    """(mean s over T1 - mean s over T2) / population std of s over T1 + T2."""
    diff = np.mean(s1, dtype=np.float64) - np.mean(s2, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(diff / np.std(np.concatenate([s1, s2]), dtype=np.float64))


def weat(
    lookup: QueryLookup,
    *,
    return_effect_size: bool = False,
    calculate_p_value: bool = False,
    p_value_test_type: str = "right-sided",
    p_value_method: str = "auto",
    p_value_iterations: int = 10000,
    random_state: int | None = None,
    max_exact_splits: int = MAX_EXACT_SPLITS,
) -> dict[str, Any]:
    """WEAT on a looked-up (2, 2) query: WEFE's result keys, plus ``s_by_word``.

    ``result`` is the statistic, or the effect size with ``return_effect_size``.
    ``p_value`` is NaN unless ``calculate_p_value``; then ``p_value_method`` records
    the method that ran ('exact', 'monte_carlo' or 'wefe').
    """
    check_lookup("WEAT", lookup)
    check_test_type(p_value_test_type)
    if p_value_method not in P_VALUE_METHODS:
        raise ValueError(f"p_value_method must be one of {P_VALUE_METHODS}, got {p_value_method!r}")
    if not lookup.ok:
        return nan_result("WEAT", lookup)
    (t1, t2), (a, b) = lookup.targets, lookup.attributes
    s1 = s_vector(t1.vectors, a.vectors, b.vectors)
    s2 = s_vector(t2.vectors, a.vectors, b.vectors)
    stat = weat_score(s1, s2)
    es = weat_effect_size(s1, s2)
    p_value, method = math.nan, None
    if calculate_p_value:
        method = "wefe" if p_value_method == "approximate" else p_value_method
        if method == "auto":
            method = "exact" if n_splits(len(s1), len(s2)) <= max_exact_splits else "monte_carlo"
        if method == "exact":
            p_value = weat_p_value_exact(s1, s2, p_value_test_type, max_exact_splits)
        elif method == "monte_carlo":
            p_value = weat_p_value_monte_carlo(
                s1, s2, p_value_iterations, random_state, p_value_test_type
            )
        else:
            p_value = weat_p_value_wefe(
                t1.found,
                s1,
                t2.found,
                s2,
                stat,
                p_value_iterations,
                random_state,
                p_value_test_type,
            )
    return {
        "query_name": lookup.query_name,
        "result": es if return_effect_size else stat,
        "weat": stat,
        "effect_size": es,
        "p_value": p_value,
        "p_value_method": method,
        "p_value_test_type": p_value_test_type if calculate_p_value else None,
        "s_by_word": {
            t1.name: dict(zip(t1.found, s1.tolist(), strict=True)),
            t2.name: dict(zip(t2.found, s2.tolist(), strict=True)),
        },
    }


# -- the nodes -------------------------------------------------------------------------------
@metric("wefe_cosine", version=VERSION, parents=given_by_builder)
def cosine(x: dict[str, Any], y: dict[str, Any]) -> np.ndarray:
    """cos(x_i, y_j) for every found word of set x and of set y (sklearn's float32 recipe)."""
    a, b = np.asarray(x["vectors"]), np.asarray(y["vectors"])
    if not (len(a) and len(b)):  # a set with no word found: nothing to compare (the lookup says why)
        return np.zeros((len(a), len(b)), np.float32)
    return cosine_matrix(a, b)


@metric("wefe_weat_s", version=VERSION, parents=given_by_builder)
def weat_s(cos_a: np.ndarray, cos_b: np.ndarray) -> np.ndarray:
    """WEAT's s(w, A, B) = mean_a cos(w, a) - mean_b cos(w, b) for every word w of T."""
    with warnings.catch_warnings():  # an empty set gives NaN; the lookup says why
        warnings.simplefilter("ignore", RuntimeWarning)
        return s_from_cosines(cos_a, cos_b)


@metric("wefe_weat_effect_size", version=VERSION, parents=given_by_builder)
def weat_effect_size_node(lookup: dict[str, Any], s1: np.ndarray, s2: np.ndarray) -> Result:
    """(mean s over T1 - mean s over T2) / population std of s over T1 + T2."""
    if lookup["reason"] is not None:  # the lookup says why every value is NaN
        return Result.nan(lookup["reason"])
    return Result(weat_effect_size(s1, s2))


class WeatParams(Params):
    return_effect_size: bool = False


# -- the builder and the node (its one declaration: engine metric and registry entry) --------
class WeatOptions(Params):
    return_effect_size: bool = False
    calculate_p_value: bool = True
    p_value: PValueParams = PValueParams()


def weat_s_node(target: Sequence[str], attr_a: Sequence[str], attr_b: Sequence[str],
                set_node: Callable[[Sequence[str]], Node]) -> Node:
    """s(w, A, B) for the words of ``target``, from cos(T, A) and cos(T, B)."""
    t = set_node(target)
    cos_a = cosine(parents={"x": t, "y": set_node(attr_a)})
    cos_b = cosine(parents={"x": t, "y": set_node(attr_b)})
    return weat_s(parents={"cos_a": cos_a, "cos_b": cos_b})


def build_weat(b: Build, weat_node: MetricDef) -> Node:
    """Four set lookups, four cosine matrices, two s vectors; effect size, p-value and WEAT on them."""
    (t1, t2), (a, a2) = b.query.target_sets, b.query.attribute_sets
    s = {"s1": weat_s_node(t1, a, a2, b.set_node), "s2": weat_s_node(t2, a, a2, b.set_node)}
    lk = b.lookup
    parents: dict[str, Any] = {"lookup": lk, **s, "effect_size": weat_effect_size_node(parents={"lookup": lk, **s})}
    if b.options.calculate_p_value:
        parents["p_value"] = weat_p_value_node(parents={"lookup": lk, **s}, **b.options.p_value.model_dump())
    return weat_node(parents=parents, return_effect_size=b.options.return_effect_size)


@fairness_metric("WEAT", node="wefe_weat", version=VERSION, params=WeatParams, options=WeatOptions, build=build_weat,
                 template=(2, 2), order=10, nan_fields={"weat": math.nan, "effect_size": math.nan, "p_value": math.nan})
def weat_node(
    lookup: dict[str, Any], s1: np.ndarray, s2: np.ndarray, effect_size: Result,
    params: WeatParams, p_value: Result | None = None,
) -> Result:
    """WEFE's WEAT result: the sum-form statistic (or the effect size), and the p-value."""
    lk = lookup_from_value(lookup)
    if not lk.ok:
        return as_result(nan_result("WEAT", lk))
    stat = weat_score(s1, s2)
    es = float(effect_size.agg_value)
    (t1, t2) = lk.targets
    return Result(es if params.return_effect_size else stat, extra={
        "query_name": lk.query_name,
        "weat": stat,
        "effect_size": es,
        "p_value": math.nan if p_value is None else float(p_value.agg_value),
        "p_value_method": None if p_value is None else p_value.extra["method"],
        "p_value_test_type": None if p_value is None else p_value.extra["test_type"],
        "p_value_random_state": None if p_value is None else p_value.extra["random_state"],
        "s_by_word": {
            t1.name: dict(zip(t1.found, np.asarray(s1).tolist(), strict=True)),
            t2.name: dict(zip(t2.found, np.asarray(s2).tolist(), strict=True)),
        },
    })
