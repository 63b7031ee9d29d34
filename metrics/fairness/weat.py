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

P-values, three ways (``p_value_method``):

``"exact"``
    every split of the pooled s values (T1 + T2, as positioned in the query) into
    |T1| and |T2|. Caliskan et al.'s one-sided p-value, ``Pr_i[stat_i > observed]``,
    with a strict inequality, so the observed split itself never counts and p can
    be 0: 'right-sided' counts ``stat > observed``, 'left-sided' ``stat < observed``,
    'two-sided' ``|stat - mu| > |observed - mu|`` where ``mu = (|T1| - |T2|) *
    mean(s)`` is the null mean (0 for equal sizes). ``p = count / #splits``.
    Comparisons carry a relative 1e-10 slack, so float rounding cannot make a split
    that ties the observed statistic (the observed split, or one that swaps equal s
    values) count as more extreme.
``"monte_carlo"``
    the same statistic and counts on ``p_value_iterations`` random permutations
    drawn from ``numpy.random.default_rng(random_state)``;
    ``p = (count + 1) / (iterations + 1)``.
``"wefe"`` (alias ``"approximate"``, WEFE's name)
    WEFE's own sampler, replayed draw for draw but with a seedable generator: it
    draws ``size = n`` words *with replacement* from the n distinct pooled target
    words (``rng.choice``), skips draws it has seen, takes the first |T1| drawn as X
    and the rest as Y, and counts ``stat > observed`` (right), ``stat < observed``
    (left) or ``|stat| > observed`` (two-sided, observed not in absolute value);
    ``runs = min(iterations, n!)`` and ``p = (count + 1) / (runs + 1)``. With the
    same seed it returns WEFE's value exactly. It is not a permutation test.
``"auto"`` (default)
    exact when there are at most ``max_exact_splits`` (200,000) splits, else
    Monte Carlo. The result records which method ran.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .lookup import QueryLookup
from .wefe_math import check_lookup, cosine_matrix, nan_result

__all__ = [
    "TEST_TYPES",
    "n_splits",
    "s_from_cosines",
    "s_vector",
    "weat",
    "weat_effect_size",
    "weat_p_value_exact",
    "weat_p_value_monte_carlo",
    "weat_p_value_wefe",
    "weat_score",
]

TEST_TYPES = ("right-sided", "left-sided", "two-sided")
P_VALUE_METHODS = ("auto", "exact", "monte_carlo", "wefe", "approximate")
MAX_EXACT_SPLITS = 200_000
_CHUNK = 8192


def s_from_cosines(cos_a: np.ndarray, cos_b: np.ndarray) -> np.ndarray:
    """s(w, A, B) per target word from its cosine rows against A and B (float64)."""
    return np.mean(cos_a, axis=1, dtype=np.float64) - np.mean(cos_b, axis=1, dtype=np.float64)


def s_vector(targets: np.ndarray, attr_a: np.ndarray, attr_b: np.ndarray) -> np.ndarray:
    """s(w, A, B) for every row of ``targets``."""
    return s_from_cosines(cosine_matrix(targets, attr_a), cosine_matrix(targets, attr_b))


def weat_score(s1: np.ndarray, s2: np.ndarray) -> float:
    """The sum-form statistic: sum of s over T1 minus sum over T2 (float64)."""
    return float(np.sum(s1, dtype=np.float64) - np.sum(s2, dtype=np.float64))


def weat_effect_size(s1: np.ndarray, s2: np.ndarray) -> float:
    """(mean s over T1 - mean s over T2) / population std of s over T1 + T2."""
    diff = np.mean(s1, dtype=np.float64) - np.mean(s2, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(diff / np.std(np.concatenate([s1, s2]), dtype=np.float64))


def _check_test_type(test_type: str) -> None:
    if test_type not in TEST_TYPES:
        raise ValueError(f"p_value_test_type must be one of {TEST_TYPES}, got {test_type!r}")


def _slack(pool: np.ndarray) -> float:
    return 1e-10 * max(float(np.sum(np.abs(pool))), np.finfo(np.float64).tiny)


class _Counter:
    """Counts null statistics more extreme than the observed one, per test type."""

    def __init__(self, pool: np.ndarray, n1: int, observed: float, test_type: str):
        _check_test_type(test_type)
        self.test_type = test_type
        self.observed = observed
        self.mu = (2 * n1 - pool.size) * float(np.mean(pool))
        self.gamma = _slack(pool)
        self.count = 0

    def add(self, stats: np.ndarray) -> None:
        if self.test_type == "right-sided":
            hits = stats > self.observed + self.gamma
        elif self.test_type == "left-sided":
            hits = stats < self.observed - self.gamma
        else:
            hits = np.abs(stats - self.mu) > abs(self.observed - self.mu) + self.gamma
        self.count += int(np.count_nonzero(hits))


def n_splits(n1: int, n2: int) -> int:
    """How many ways T1 + T2 splits into groups of |T1| and |T2|."""
    return math.comb(n1 + n2, n1)


def weat_p_value_exact(
    s1: np.ndarray,
    s2: np.ndarray,
    test_type: str = "right-sided",
    max_splits: int = MAX_EXACT_SPLITS,
) -> float:
    """Exact permutation p-value over every split; see the module docstring."""
    _check_test_type(test_type)
    pool = np.concatenate([np.asarray(s1, np.float64), np.asarray(s2, np.float64)])
    n, n1 = pool.size, len(s1)
    total_splits = n_splits(n1, n - n1)
    if total_splits > max_splits:
        raise ValueError(
            f"an exact test needs {total_splits:,} splits of {n1}+{n - n1} words, more than "
            f"max_exact_splits={max_splits:,}; use p_value_method='monte_carlo' or raise the cap"
        )
    counter = _Counter(pool, n1, weat_score(s1, s2), test_type)
    total = float(np.sum(pool))
    combos = itertools.combinations(range(n), n1)
    while True:
        flat = np.fromiter(
            itertools.chain.from_iterable(itertools.islice(combos, _CHUNK)), dtype=np.intp
        )
        if flat.size == 0:
            break
        counter.add(2.0 * pool[flat.reshape(-1, n1)].sum(axis=1) - total)
    return counter.count / total_splits


def weat_p_value_monte_carlo(
    s1: np.ndarray,
    s2: np.ndarray,
    iterations: int = 10000,
    random_state: int | None = None,
    test_type: str = "right-sided",
) -> float:
    """Seeded Monte-Carlo permutation p-value, ``(count + 1) / (iterations + 1)``."""
    _check_test_type(test_type)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"p_value_iterations must be a positive int, got {iterations!r}")
    pool = np.concatenate([np.asarray(s1, np.float64), np.asarray(s2, np.float64)])
    n, n1 = pool.size, len(s1)
    counter = _Counter(pool, n1, weat_score(s1, s2), test_type)
    total = float(np.sum(pool))
    rng = np.random.default_rng(random_state)
    done = 0
    while done < iterations:
        b = min(_CHUNK, iterations - done)
        perms = rng.permuted(np.tile(np.arange(n), (b, 1)), axis=1)
        counter.add(2.0 * pool[perms[:, :n1]].sum(axis=1) - total)
        done += b
    return (counter.count + 1) / (iterations + 1)


def weat_p_value_wefe(
    words1: Sequence[str],
    s1: np.ndarray,
    words2: Sequence[str],
    s2: np.ndarray,
    observed: float,
    iterations: int = 10000,
    random_state: int | np.random.Generator | None = None,
    test_type: str = "right-sided",
) -> float:
    """WEFE 1.0.1's sampler, replayed with ``numpy.random.default_rng(random_state)``.

    The pool is WEFE's ``{**T1, **T2}``: distinct words, T1's first; |X| is the number
    of distinct T1 words. ``rng.choice(n, size=n)`` draws the same indices as WEFE's
    ``rng.choice(words, size=n)`` for the same generator state. Statistic per draw:
    float64 sums of the pooled s values, as WEFE's ``_calc_weat``.
    """
    _check_test_type(test_type)
    if isinstance(iterations, bool) or not isinstance(iterations, (int, float)) or iterations < 1:
        raise ValueError(f"p_value_iterations must be a positive number, got {iterations!r}")
    s_of: dict[str, float] = dict(zip(words1, np.asarray(s1, np.float64), strict=True))
    n1 = len(s_of)
    s_of.update(zip(words2, np.asarray(s2, np.float64), strict=True))
    pool = np.fromiter(s_of.values(), dtype=np.float64, count=len(s_of))
    n = pool.size
    runs = min(iterations, math.factorial(n))
    passes = {
        "right-sided": lambda stat: stat > observed,
        "left-sided": lambda stat: stat < observed,
        "two-sided": lambda stat: np.abs(stat) > observed,
    }[test_type]
    rng = (
        random_state
        if isinstance(random_state, np.random.Generator)
        else np.random.default_rng(random_state)
    )
    seen: set[bytes] = set()
    count = 0
    while len(seen) < runs:
        draw = rng.choice(n, size=n)
        key = draw.tobytes()
        if key in seen:
            continue
        seen.add(key)
        stat = np.sum(pool[draw[:n1]], dtype=np.float64) - np.sum(pool[draw[n1:]], dtype=np.float64)
        if passes(stat):
            count += 1
    return (count + 1) / (runs + 1)


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
    _check_test_type(p_value_test_type)
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
