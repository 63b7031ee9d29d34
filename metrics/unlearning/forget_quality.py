"""Forget quality: does the unlearned model's truth ratio look like the retain model's?

Mirrors open-unlearning at commit d3d7cf9, ``src/evals/metrics/privacy.py:6-32``
(``ks_test``): the two-sample Kolmogorov-Smirnov p-value between the per-item forget
truth ratios of the model and of a model trained without the forget set.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ...engine import Result, metric
from ...engine.knowledge import neg_log10

NO_RETAIN_FQ = "no retain-model truth ratios: forget quality needs --retain-logs or --retain-model (open-unlearning: retain_logs_path)"


def _scores_of(x: Mapping[str, Any] | Sequence[Any], side: str) -> np.ndarray:
    """Scores from a ``value_by_index`` mapping (``{"<row>": {"score"}}``) or a list."""
    if isinstance(x, Mapping):
        bad = next(((k, v) for k, v in x.items() if not (isinstance(v, Mapping) and "score" in v)), None)
        if bad is not None:  # retain logs are checked on reading; this names a row that came another way
            kind = "an object without 'score'" if isinstance(bad[1], Mapping) else f"a {type(bad[1]).__name__}"
            raise ValueError(f"{side} truth ratios: value_by_index[{bad[0]!r}] is {kind}, expected {{score}}")
        x = [v["score"] for v in x.values()]
    return np.asarray([np.nan if s is None else s for s in x], dtype=np.float64)


def forget_quality(
    model_truth_ratios: Mapping[str, Any] | Sequence[float],
    retain_truth_ratios: Mapping[str, Any] | Sequence[float] | None = None,
) -> dict[str, Any]:
    """``ks_2samp(tr_model, tr_retain).pvalue`` on the raw per-item truth ratios.

    ``privacy.py:6-32``: two-sided, scipy's default (exact for small samples) method,
    all items including NaN ones (a NaN makes the p-value NaN). Without retain values
    the value is None, as there, with a reason instead of only a log warning.
    """
    if retain_truth_ratios is None or len(retain_truth_ratios) == 0:
        return {"agg_value": None, "reason": NO_RETAIN_FQ}
    from scipy.stats import ks_2samp  # imported here: scipy.stats costs ~0.5 s at start-up

    p = float(ks_2samp(_scores_of(model_truth_ratios, "model"), _scores_of(retain_truth_ratios, "retain")).pvalue)
    out: dict[str, Any] = {"agg_value": p}
    if math.isnan(p):
        out["reason"] = "a truth ratio is NaN (an item with no scored tokens)"
    return out


@metric("forget_quality", version="1", parents={"forget": "truth_ratio"},
        knowledge=neg_log10("a KS p-value: near 1 when the truth ratios look like the retain model's (forgotten), "
                            "tiny when they do not; -log10 keeps its scale"))
def forget_quality_node(forget: Result, retain: Result | None = None) -> Result:
    """KS-test p-value between the model's and the retain model's per-item forget truth ratios.

    ``retain`` is the same truth-ratio node on the retain model, or the value read from
    retain logs; without it the value is None, with a reason.
    """
    retain_tr = retain.value_by_index if retain is not None and retain.value_by_index else None
    out = forget_quality(forget.value_by_index, retain_tr)
    if retain is not None and retain.reason and out.get("agg_value") is None:
        out["reason"] = retain.reason
    return Result.from_dict(out)
