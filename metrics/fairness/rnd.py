"""RND, Relative Norm Distance (Garg et al. 2018), as WEFE 1.0.1 computes it. Template (2, 1).

The mean over attribute words a of ``d(a, mean T1) - d(a, mean T2)``.
``distance='norm'`` is the Euclidean norm; ``distance='cos'`` is the cosine
*similarity* (WEFE's naming), so the two options have opposite signs for the same
bias. Target means are float32, each distance float32, the running sum float64.
``distance_by_word`` is sorted ascending.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from ...engine import Params, Result
from .cosine import cosine_matrix
from .lookup import QueryLookup
from .registry import as_result, check_lookup, fairness_metric, nan_result
from .word_sets import VERSION, lookup_from_value


def rnd(lookup: QueryLookup, *, distance: str = "norm") -> dict[str, Any]:
    """Relative Norm Distance; see the module docstring for the sign conventions."""
    check_lookup("RND", lookup)
    if distance not in ("norm", "cos"):
        raise ValueError(f'distance must be "norm" or "cos", got {distance!r}')
    if not lookup.ok:
        return nan_result("RND", lookup)
    (t1, t2), (attr,) = lookup.targets, lookup.attributes
    m1 = np.mean(t1.vectors, axis=0)  # float32, as np.average on float32 rows
    m2 = np.mean(t2.vectors, axis=0)
    if distance == "norm":
        d1 = [np.linalg.norm(a - m1) for a in attr.vectors]
        d2 = [np.linalg.norm(a - m2) for a in attr.vectors]
    else:
        d1 = cosine_matrix(attr.vectors, m1[None, :])[:, 0]
        d2 = cosine_matrix(attr.vectors, m2[None, :])[:, 0]
    diffs = [np.float32(x) - np.float32(y) for x, y in zip(d1, d2, strict=True)]  # float32, as WEFE
    total = 0.0
    for d in diffs:  # float64 running sum of float32 terms, in attribute order
        total += float(d)
    by_word = dict(zip(attr.found, (float(d) for d in diffs), strict=True))
    value = total / len(by_word)
    return {
        "query_name": lookup.query_name,
        "result": value,
        "rnd": value,
        "distance_by_word": dict(sorted(by_word.items(), key=lambda kv: kv[1])),
    }


# -- the node (its one declaration: engine metric and registry entry) -------------------------
class RndParams(Params):
    distance: Literal["norm", "cos"] = "norm"


@fairness_metric("RND", node="wefe_rnd", version=VERSION, params=RndParams, template=(2, 1), order=20,
                 nan_fields={"rnd": math.nan, "distance_by_word": {}})
def rnd_node(lookup: dict[str, Any], params: RndParams) -> Result:
    """Relative Norm Distance ('norm': Euclidean; 'cos': cosine *similarity*, WEFE's naming)."""
    return as_result(rnd(lookup_from_value(lookup), distance=params.distance))
