"""Utility aggregate: TOFU's model utility, the harmonic mean of nine retain-side scores.

Mirrors open-unlearning at commit d3d7cf9, ``src/evals/metrics/utility.py:13-16``
(``hm_aggregate``: ``scipy.stats.hmean`` of the pre-computes' ``agg_value``) with the
list in ``configs/eval/tofu_metrics/model_utility.yaml``. A harmonic mean is 0 as soon
as one input is 0 (scipy returns 0 there); that is kept on purpose: utility collapses
when any one ability does. The formula is pure numpy/scipy.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ...engine import Result, metric

# The nine pre-computes, in the config's order.
MODEL_UTILITY_PARTS = (
    "retain_Q_A_Prob",
    "retain_Q_A_ROUGE",
    "retain_Truth_Ratio",
    "ra_Q_A_Prob_normalised",
    "ra_Q_A_ROUGE",
    "ra_Truth_Ratio",
    "wf_Q_A_Prob_normalised",
    "wf_Q_A_ROUGE",
    "wf_Truth_Ratio",
)


def harmonic_mean(values: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
    """``hmean`` of the values (a mapping is read as name -> value or name -> block).

    Any 0 gives 0. A negative value (no TOFU score can be negative) is an error naming
    it; scipy would return NaN. A NaN or None input makes the result NaN with a reason
    naming the inputs, where open-unlearning would silently give NaN.
    """
    if isinstance(values, Mapping):
        named = [(str(k), v.get("agg_value") if isinstance(v, Mapping) else v) for k, v in values.items()]
    else:
        named = [(str(i), v) for i, v in enumerate(values)]
    if not named:
        raise ValueError("harmonic mean of no values")
    missing = [k for k, v in named if v is None or math.isnan(float(v))]
    if missing:
        return {"agg_value": float("nan"), "reason": f"NaN because {_names(missing)} {'has' if len(missing) == 1 else 'have'} no value"}
    negative = [k for k, v in named if float(v) < 0]
    if negative:
        raise ValueError(f"harmonic mean needs non-negative values; negative: {negative}")
    nums = [float(v) for _, v in named]
    zeros = [k for k, v in named if float(v) == 0.0]
    if zeros:  # the aggregate names the input that collapsed it (a bare 0 looks like a bug)
        return {"agg_value": 0.0, "reason": f"0 because {_names(zeros)} {'is' if len(zeros) == 1 else 'are'} 0"}
    from scipy.stats import hmean  # imported here: scipy.stats costs ~0.5 s at start-up

    return {"agg_value": float(hmean(nums))}


def _names(keys: list[str]) -> str:
    return ", ".join(keys)


def model_utility(parts: Mapping[str, Any]) -> dict[str, Any]:
    """TOFU model utility from the nine parts (values or blocks), checked by name."""
    absent = [p for p in MODEL_UTILITY_PARTS if p not in parts]
    extra = [p for p in parts if p not in MODEL_UTILITY_PARTS]
    if absent or extra:
        raise ValueError(f"model utility needs exactly {list(MODEL_UTILITY_PARTS)}; missing {absent}, unexpected {extra}")
    return harmonic_mean({p: parts[p] for p in MODEL_UTILITY_PARTS})


# ------------------------------------------------------------------ the metric


@metric("model_utility", version="1")
def model_utility_node(**parts: Result) -> Result:
    """Harmonic mean of the nine retain-side scores (0 as soon as one of them is 0).

    The parents are passed by the benchmark under the names in MODEL_UTILITY_PARTS.
    """
    return Result.from_dict(model_utility({k: v.agg_value for k, v in parts.items()}))
