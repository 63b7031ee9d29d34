"""Seeded bootstrap intervals over ProbeItems, GenderBench-compatible or numpy-native.

GenderBench 1.1.0 calls ``random.seed(random_seed)`` (the global RNG) and then, for each
of ``bootstrap_cycles`` cycles, ``random.choices(probe_items, k=len(probe_items))`` and
the metric calculator on that sample. Per metric it drops NaN values, fits
``scipy.stats.norm.fit`` and keeps ``norm.interval(bootstrap_alpha, ...)``; an all-NaN
metric gives ``(nan, nan)`` and a constant one ``(v, v)``.

``mode="genderbench"`` draws the very same item indices without touching the global RNG:
``random.choices`` takes ``floor(random() * n)``; a private ``random.Random(seed)``
has the state ``random.seed(seed)`` gives, and numpy's legacy ``RandomState`` started
from that Mersenne Twister state produces the same doubles, so all cycles are drawn
at once. ``mode="numpy"`` draws with ``numpy.random.default_rng``
(faster, not GenderBench's draws). Either way, a calculator with a ``vectorised``
method computes every cycle's metrics from a per-item table and the cycles' item
multiplicities (:func:`multiplicities`) in a few matrix products;
otherwise each cycle calls ``calculate`` on the resampled items (per-item scores are
memoised, as in GenderBench).
"""

from __future__ import annotations

import math
import random
from typing import Any, Literal

import numpy as np

BootstrapMode = Literal["genderbench", "numpy"]


def python_random_doubles(seed: int, count: int) -> np.ndarray:
    """The first ``count`` values of ``random.Random(seed).random()``, as one array.

    The Mersenne Twister state after Python's seeding is handed to numpy's legacy
    generator, whose ``random_sample`` builds doubles as ``random()`` does.
    """
    version, state, _ = random.Random(seed).getstate()
    rs = np.random.RandomState()
    rs.set_state(("MT19937", np.array(state[:624], dtype=np.uint32), state[624]))
    return rs.random_sample(count)


def resample_indices(n_items: int, cycles: int, seed: int, mode: BootstrapMode = "genderbench") -> np.ndarray:
    """``[cycles, n_items]`` item indices, one row per bootstrap cycle."""
    if n_items < 1:
        raise ValueError("the bootstrap needs at least one probe item")
    if mode == "genderbench":
        u = python_random_doubles(seed, cycles * n_items).reshape(cycles, n_items)
        return np.floor(u * float(n_items)).astype(np.int64)
    if mode == "numpy":
        return np.random.default_rng(seed).integers(0, n_items, size=(cycles, n_items))
    raise ValueError(f"unknown bootstrap mode {mode!r} (genderbench or numpy)")


def multiplicities(samples: np.ndarray, n_items: int) -> np.ndarray:
    """``[cycles, n_items]``: how often each item was drawn in each cycle (float64).

    A cycle's sum of any per-item count is then one row of ``W @ counts``: exact for
    integer counts, and no ``[cycles, n_items, ...]`` gather.
    """
    cycles = samples.shape[0]
    flat = (samples + np.arange(cycles)[:, None] * n_items).ravel()
    return np.bincount(flat, minlength=cycles * n_items).reshape(cycles, n_items).astype(np.float64)


def reference_indices(n_items: int, cycles: int, seed: int) -> np.ndarray:
    """The same indices the slow way, with a private ``random.Random`` (for tests)."""
    rng = random.Random(seed)
    population = range(n_items)
    return np.array([rng.choices(population, k=n_items) for _ in range(cycles)], dtype=np.int64)


def normal_interval(values: list[float], alpha: float) -> tuple[float, float]:
    """GenderBench's rule for one metric's bootstrap values."""
    from scipy.stats import norm  # scipy is heavy to import; only intervals need it

    arr = np.asarray(values, dtype=np.float64)
    finite = arr[~np.isnan(arr)]
    if finite.size == 0:
        return (math.nan, math.nan)
    if arr.size == finite.size and np.all(arr == arr[0]):
        return (float(arr[0]), float(arr[0]))
    low, high = norm.interval(alpha, *norm.fit(list(finite)))
    return (float(low), float(high))


def bootstrap_metrics(
    items: list[Any],
    calculator: Any,
    *,
    cycles: int = 1000,
    seed: int = 123,
    mode: BootstrapMode = "genderbench",
    vectorised: bool = True,
) -> dict[str, np.ndarray]:
    """Metric name -> array of its value in each cycle (NaN where undefined)."""
    samples = resample_indices(len(items), cycles, seed, mode)
    if vectorised and hasattr(calculator, "vectorised"):
        table = calculator.item_table(items)
        out = calculator.vectorised(table, multiplicities(samples, len(items)))
        return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
    buffer: dict[str, list[float]] = {}
    for row in samples:
        for name, value in calculator([items[i] for i in row]).items():
            buffer.setdefault(name, []).append(value)
    return {k: np.asarray(v, dtype=np.float64) for k, v in buffer.items()}


def bootstrap_intervals(
    items: list[Any],
    calculator: Any,
    *,
    cycles: int = 1000,
    alpha: float = 0.95,
    seed: int = 123,
    mode: BootstrapMode = "genderbench",
    vectorised: bool = True,
) -> dict[str, tuple[float, float]]:
    """Metric name -> (low, high), GenderBench's ``calculate_metrics`` with CIs."""
    values = bootstrap_metrics(items, calculator, cycles=cycles, seed=seed, mode=mode, vectorised=vectorised)
    return {name: normal_interval(list(v), alpha) for name, v in values.items()}
