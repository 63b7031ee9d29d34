"""Small helpers the unlearning metrics share: row keys, open-unlearning's result blocks.

open-unlearning's result shape is ``{"agg_value": ..., "value_by_index": {"<row>":
{...}}}`` with string row keys; these functions build and summarise it. No model, no
file, no torch.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

EPS = 1e-10  # open-unlearning's guard in every ratio


def as_float_array(values: Any, name: str = "values") -> np.ndarray:
    """A 1-D float64 copy; float32 model outputs are widened exactly, never rounded."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of per-token values, got shape {arr.shape}")
    return arr


def index_keys(n: int, indices: Sequence[Any] | None = None) -> list[str]:
    """Row keys as strings; ``indices`` defaults to the row positions ``0..n-1``.

    open-unlearning keys ``value_by_index`` by the dataset's row position
    (``add_dataset_index``, ``src/data/utils.py:323``), so that is the default.
    """
    if indices is None:
        return [str(i) for i in range(n)]
    if len(indices) != n:
        raise ValueError(f"got {len(indices)} indices for {n} items")
    keys = [str(i) for i in indices]
    if len(set(keys)) != n:
        raise ValueError("indices repeat: every item needs its own row index")
    return keys


def mean_over_options(x: Any) -> float:
    """``aggregate_to_1D`` for one item: a scalar stays, a list of options is averaged."""
    if isinstance(x, (list, tuple, np.ndarray)):
        return float(np.mean(np.asarray(x, dtype=np.float64)))
    return float(x)


def mean_of_field(value_by_index: Mapping[str, Any], field: str) -> float:
    """Mean over items of ``field``, each item first averaged over its options.

    Items whose field is None are skipped, as open-unlearning's ``if evals[field] is
    not None`` filters do; a NaN is kept and makes the mean NaN (also as there).
    """
    vals = [mean_over_options(v[field]) for v in value_by_index.values() if v[field] is not None]
    if not vals:
        return float("nan")
    return float(np.mean(vals))


def nan_items(value_by_index: Mapping[str, Any], field: str, limit: int = 5) -> list[str]:
    """The first few row keys whose ``field`` is NaN (to name them in a reason)."""
    out: list[str] = []
    for key, item in value_by_index.items():
        val = item.get(field)
        if val is not None and math.isnan(mean_over_options(val)):
            out.append(key)
            if len(out) == limit:
                break
    return out


def with_reason(block: dict[str, Any], field: str, what: str) -> dict[str, Any]:
    """Attach a ``reason`` naming the NaN items when the block's agg_value is NaN."""
    agg = block.get("agg_value")
    if isinstance(agg, float) and math.isnan(agg):
        rows = nan_items(block.get("value_by_index") or {}, field)
        block["reason"] = f"{what} is NaN: NaN {field} at rows {rows}" if rows else f"{what} is NaN: no items"
    return block


def paired_items(correct: Mapping[str, Any], wrong: Mapping[str, Any], what: str) -> list[str]:
    """The shared row keys, in order; open-unlearning asserts both key lists are equal."""
    ck, wk = [str(k) for k in correct], [str(k) for k in wrong]
    if ck != wk:
        missing = sorted(set(ck) ^ set(wk))[:5]
        raise ValueError(f"{what}: correct and wrong results cover different rows (e.g. {missing}) or order")
    return ck


def paired_block(correct: Mapping[str, Any], wrong: Mapping[str, Any], what: str, field: str, score: Callable[[Any, Any], float]) -> dict[str, Any]:
    """``{row: {field: score(correct_item, wrong_item)}}`` over the rows both sides share."""
    vbi: dict[str, Any] = {}
    for k in paired_items(correct, wrong, what):
        c, w = correct[k], wrong[k]
        if c is None or w is None:
            vbi[k] = {field: None, "reason": "missing correct or wrong result"}
        else:
            vbi[k] = {field: score(c, w)}
    return vbi
