"""Privleak: the Min-K% attack's 1-AUC relative to the retain model's, in percent (MUSE).

Mirrors open-unlearning at commit d3d7cf9, ``src/evals/metrics/privacy.py:35-66``
(``privleak`` and the unused ``rel_diff``).
"""

from __future__ import annotations

import math
from typing import Any

from ...engine import Params, Result, metric
from ...engine.knowledge import signed


def privleak(auc_model: float, auc_retain: float | None = None, ref_value: float = 0.5) -> dict[str, Any]:
    """``(s - r) / (r + 1e-10) * 100`` with ``s = 1 - AUC_model``, ``r = 1 - AUC_retain``.

    ``privacy.py:35-52``: MUSE reports 1-AUC, so both sides are flipped and the
    difference is *relative to the retain model's* 1-AUC. Without retain logs,
    ``r = 1 - ref_value`` (0.5 in the configs) and a reason says so.
    """
    out: dict[str, Any] = {}
    if auc_retain is None:
        auc_retain = ref_value
        out["reason"] = f"no retain-model AUC (no --retain-logs or --retain-model): compared with AUC {ref_value}"
    s, r = 1.0 - float(auc_model), 1.0 - float(auc_retain)
    value = (s - r) / (r + 1e-10) * 100.0
    if not math.isfinite(value) and "reason" not in out:  # a NaN that says why (the retain logs are checked on reading)
        out["reason"] = f"privleak is {value}: an AUC is not a number in [0, 1] (model {auc_model!r}, retain {auc_retain!r})"
    return {"agg_value": value, **out}


def rel_diff(score: float, reference: float | None = None, ref_value: float = 0.5) -> dict[str, Any]:
    """``privacy.py:55-66`` (registered, used by no config): privleak without the flips."""
    ref = ref_value if reference is None else float(reference)
    return {"agg_value": (float(score) - ref) / (ref + 1e-10) * 100.0}


class PrivleakParams(Params):
    ref_value: float = 0.5  # used when no retain-model AUC is available


@metric("privleak", version="1", params=PrivleakParams, parents={"forget": "mia_min_k"},
        knowledge=signed(-0.01, "negative when the model tells forget from holdout rows better than the retain model "
                                "(it still knows them), positive when worse; 0 is the retain model: signed, so no ratio"))
def privleak_node(forget: Result, params: PrivleakParams, retain: Result | None = None) -> Result:
    """Relative difference of 1-AUC (Min-K%) between the model and the retain model, in percent."""
    auc_retain = retain.agg_value if retain is not None else None
    return Result.from_dict(privleak(forget.agg_value, auc_retain, params.ref_value))
