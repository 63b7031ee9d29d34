"""WEAT's test statistic and its permutation p-values, and the p-value node.

The statistic is WEFE 1.0.1's *sum* form, ``sum_{x in T1} s(x) - sum_{y in T2} s(y)``,
computed from the two cached s vectors (``weat.py``); no p-value needs another cosine.

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
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ...engine import Params, Result, metric
from .registry import given_by_builder
from .word_sets import VERSION

__all__ = [
    "MAX_EXACT_SPLITS", "P_VALUE_METHODS", "PValueParams", "TEST_TYPES", "n_splits", "weat_p_value_exact",
    "weat_p_value_monte_carlo", "weat_p_value_node", "weat_p_value_wefe", "weat_score",
]

TEST_TYPES = ("right-sided", "left-sided", "two-sided")
P_VALUE_METHODS = ("auto", "exact", "monte_carlo", "wefe", "approximate")
MAX_EXACT_SPLITS = 200_000
_CHUNK = 8192


def weat_score(s1: np.ndarray, s2: np.ndarray) -> float:
    """The sum-form statistic: sum of s over T1 minus sum over T2 (float64)."""
    return float(np.sum(s1, dtype=np.float64) - np.sum(s2, dtype=np.float64))


def check_test_type(test_type: str) -> None:
    if test_type not in TEST_TYPES:
        raise ValueError(f"p_value_test_type must be one of {TEST_TYPES}, got {test_type!r}")


def _slack(pool: np.ndarray) -> float:
    return 1e-10 * max(float(np.sum(np.abs(pool))), np.finfo(np.float64).tiny)


class _Counter:
    """Counts null statistics more extreme than the observed one, per test type."""

    def __init__(self, pool: np.ndarray, n1: int, observed: float, test_type: str):
        check_test_type(test_type)
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
    check_test_type(test_type)
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
    check_test_type(test_type)
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
    check_test_type(test_type)
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


# -- the node -------------------------------------------------------------------------------
class PValueParams(Params):
    """A permutation p-value for WEAT; the seed is a param, so results are cached."""

    method: Literal["auto", "exact", "monte_carlo", "wefe"] = "auto"
    test_type: Literal["right-sided", "left-sided", "two-sided"] = "right-sided"
    iterations: int = Field(10000, ge=1)
    random_state: int | None = 0
    max_exact_splits: int = Field(MAX_EXACT_SPLITS, ge=1)


@metric("wefe_weat_p_value", version=VERSION, parents=given_by_builder, params=PValueParams)
def weat_p_value_node(lookup: dict[str, Any], s1: np.ndarray, s2: np.ndarray, params: PValueParams) -> Result:
    """Exact when the splits are few, seeded Monte Carlo otherwise, or WEFE's own sampler.

    The same choice and the same functions as ``weat.weat``, but on the cached
    s vectors: an exact test over C(16, 8) splits takes milliseconds.
    """
    if lookup["reason"] is not None:  # the lookup says why every value is NaN
        return Result.nan(lookup["reason"])
    method = params.method
    if method == "auto":
        method = "exact" if n_splits(len(s1), len(s2)) <= params.max_exact_splits else "monte_carlo"
    if method == "exact":
        p = weat_p_value_exact(s1, s2, params.test_type, params.max_exact_splits)
    elif method == "monte_carlo":
        p = weat_p_value_monte_carlo(s1, s2, params.iterations, params.random_state, params.test_type)
    else:
        t1, t2 = lookup["targets"]
        p = weat_p_value_wefe(
            t1["found"], s1, t2["found"], s2, weat_score(s1, s2),
            params.iterations, params.random_state, params.test_type,
        )
    seeded = method != "exact"
    return Result(p, extra={
        "method": method,
        "test_type": params.test_type,
        "iterations": params.iterations if seeded else None,
        "random_state": params.random_state if seeded else None,
    })
