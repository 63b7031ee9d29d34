"""ECT, Embedding Coherence Test (Dev & Phillips 2019), as WEFE 1.0.1 computes it. Template (2, 1).

Spearman's rho (scipy) between the cosine similarities of each attribute word to
mean T1 and to mean T2.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...engine import Result
from .cosine import cosine_distance_matrix
from .lookup import QueryLookup
from .registry import as_result, check_lookup, fairness_metric, nan_result
from .word_sets import VERSION, lookup_from_value


def ect(lookup: QueryLookup) -> dict[str, Any]:
    """Embedding Coherence Test; adds ``similarities`` (per attribute word, to each mean)."""
    check_lookup("ECT", lookup)
    if not lookup.ok:
        return nan_result("ECT", lookup)
    (t1, t2), (attr,) = lookup.targets, lookup.attributes
    means = np.stack([np.mean(t1.vectors, axis=0), np.mean(t2.vectors, axis=0)])
    sims = 1.0 - cosine_distance_matrix(means, attr.vectors)  # (2, n_attr) float64
    if attr.vectors.shape[0] < 2:
        value = math.nan
    else:
        from scipy.stats import spearmanr  # imported here: scipy.stats costs ~0.5 s at start-up

        res = spearmanr(sims[0], sims[1])
        value = float(getattr(res, "statistic", res[0]))
    return {
        "query_name": lookup.query_name,
        "result": value,
        "ect": value,
        "similarities": {
            w: [float(sims[0, i]), float(sims[1, i])] for i, w in enumerate(attr.found)
        },
    }


# -- the node (its one declaration: engine metric and registry entry) -------------------------
@fairness_metric("ECT", node="wefe_ect", version=VERSION, template=(2, 1), order=50, nan_fields={"ect": math.nan})
def ect_node(lookup: dict[str, Any]) -> Result:
    """Embedding Coherence Test: Spearman's rho of the two targets' similarity profiles."""
    return as_result(ect(lookup_from_value(lookup)))
