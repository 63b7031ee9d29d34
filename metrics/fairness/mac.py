"""MAC, Mean Average Cosine (Manzini et al. 2019), as WEFE 1.0.1 computes it. Template ('n', 'n').

The mean over every target word and every attribute set of ``mean_a (1 - cos(t, a))``
-- a mean cosine *distance* despite the name, so lower means more associated.
``targets_eval`` keeps each (target set, word, attribute set) term.
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


def mac(lookup: QueryLookup) -> dict[str, Any]:
    """Mean Average Cosine: the mean cosine distance of target words to attribute sets."""
    check_lookup("MAC", lookup)
    if not lookup.ok:
        return nan_result("MAC", lookup)
    targets_eval: dict[str, dict[str, dict[str, float]]] = {}
    scores: list[float] = []
    for t in lookup.targets:
        per_set = [
            np.mean(cosine_distance_matrix(t.vectors, a.vectors), axis=1) for a in lookup.attributes
        ]
        targets_eval[t.name] = {}
        for i, word in enumerate(t.found):
            row = {a.name: float(per_set[j][i]) for j, a in enumerate(lookup.attributes)}
            targets_eval[t.name][word] = row
            scores.extend(row.values())
    value = float(np.mean(np.array(scores, dtype=np.float64)))
    return {
        "query_name": lookup.query_name,
        "result": value,
        "mac": value,
        "targets_eval": targets_eval,
    }


# -- the node (its one declaration: engine metric and registry entry) -------------------------
@fairness_metric("MAC", node="wefe_mac", version=VERSION, template=("n", "n"), order=40,
                 nan_fields={"mac": math.nan, "targets_eval": {}})
def mac_node(lookup: dict[str, Any]) -> Result:
    """Mean Average Cosine: the mean cosine *distance* of target words to attribute sets."""
    return as_result(mac(lookup_from_value(lookup)))
