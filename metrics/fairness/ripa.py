"""RIPA, Relational Inner Product Association (Ethayarajh et al. 2019), as WEFE 1.0.1 computes it.

Template (2, 1). For i in range(|T1|), ``b_i = (t1_i - t2_i) / ||t1_i - t2_i||``; per
attribute word the mean and population std over i of ``a . b_i``; the result is the
mean of those means (all float32). Pairs are matched by position *after*
out-of-vocabulary words are dropped (WEFE's behaviour, ``pairing='wefe'``): if T2
then has fewer words than T1, WEFE raises a bare IndexError; here
``RipaPairingError`` names the query and the words. ``pairing='query'`` instead pairs
by the positions in the query and drops a pair when either word is missing -- the
pairing the paper means.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from ...engine import Params, Result
from .lookup import QueryLookup
from .registry import as_result, check_lookup, fairness_metric, nan_result
from .word_sets import VERSION, lookup_from_value


class RipaPairingError(IndexError):
    """RIPA's T2 has fewer found words than T1, so position i has no partner."""


def _ripa_pairs(lookup: QueryLookup, pairing: str) -> tuple[np.ndarray, np.ndarray]:
    t1, t2 = lookup.targets
    if pairing == "query":
        pairs = zip(
            t1.positions, t2.positions, strict=False
        )  # extra words of the longer set unused
        keep = [(i, j) for i, j in pairs if i >= 0 and j >= 0]
        if not keep:
            raise RipaPairingError(
                f"RIPA on query '{lookup.query_name}': no position has both target words in "
                f"the vocabulary"
            )
        return t1.vectors[[i for i, _ in keep]], t2.vectors[[j for _, j in keep]]
    n1, n2 = len(t1.found), len(t2.found)
    if n2 < n1:
        raise RipaPairingError(
            f"RIPA on query '{lookup.query_name}': target set '{t1.name}' has {n1} words in the "
            f"vocabulary but '{t2.name}' only {n2} (missing {list(t2.missing)}); WEFE pairs by "
            f"position after dropping missing words and fails here with IndexError. Use "
            f"pairing='query' to pair by query position and drop incomplete pairs."
        )
    return t1.vectors, t2.vectors[:n1]


def ripa(lookup: QueryLookup, *, pairing: str = "wefe") -> dict[str, Any]:
    """Relational Inner Product Association; ``pairing`` is 'wefe' or 'query'."""
    check_lookup("RIPA", lookup)
    if pairing not in ("wefe", "query"):
        raise ValueError(f"pairing must be 'wefe' or 'query', got {pairing!r}")
    if not lookup.ok:
        return nan_result("RIPA", lookup)
    x, y = _ripa_pairs(lookup, pairing)
    attr = lookup.attributes[0]
    rel = x - y  # float32
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.stack([r / np.linalg.norm(r) for r in rel]) if len(rel) else rel
    word_values: dict[str, dict[str, float]] = {}
    means = []
    for word, a in zip(attr.found, attr.vectors, strict=True):
        scores = np.array([np.dot(a, bi) for bi in b], dtype=np.float32)
        m = np.mean(scores)
        means.append(m)
        word_values[word] = {"mean": float(m), "std": float(np.std(scores))}
    value = float(np.mean(np.array(means, dtype=np.float32)))
    return {
        "query_name": lookup.query_name,
        "result": value,
        "ripa": value,
        "word_values": word_values,
    }


# -- the node (its one declaration: engine metric and registry entry) -------------------------
class RipaParams(Params):
    pairing: Literal["wefe", "query"] = "wefe"


@fairness_metric("RIPA", node="wefe_ripa", version=VERSION, params=RipaParams, template=(2, 1), order=60,
                 nan_fields={"ripa": math.nan, "word_values": math.nan})
def ripa_node(lookup: dict[str, Any], params: RipaParams) -> Result:
    """Relational Inner Product Association over paired target words."""
    return as_result(ripa(lookup_from_value(lookup), pairing=params.pairing))
