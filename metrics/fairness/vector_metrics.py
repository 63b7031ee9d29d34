"""RND, MAC, ECT and RIPA as WEFE 1.0.1 computes them, quirks included.

* RND (Garg et al. 2018), template (2, 1): mean over attribute words a of
  ``d(a, mean T1) - d(a, mean T2)``. ``distance='norm'`` is the Euclidean norm;
  ``distance='cos'`` is the cosine *similarity* (WEFE's naming), so the two options
  have opposite signs for the same bias. Target means are float32, each distance
  float32, the running sum float64. ``distance_by_word`` is sorted ascending.
* MAC (Manzini et al. 2019), template ('n', 'n'): the mean over every target word and
  every attribute set of ``mean_a (1 - cos(t, a))`` -- a mean cosine *distance*
  despite the name, so lower means more associated. ``targets_eval`` keeps each
  (target set, word, attribute set) term.
* ECT (Dev & Phillips 2019), template (2, 1): Spearman's rho (scipy) between the
  cosine similarities of each attribute word to mean T1 and to mean T2.
* RIPA (Ethayarajh et al. 2019), template (2, 1): for i in range(|T1|),
  ``b_i = (t1_i - t2_i) / ||t1_i - t2_i||``; per attribute word the mean and
  population std over i of ``a . b_i``; the result is the mean of those means (all
  float32). Pairs are matched by position *after* out-of-vocabulary words are dropped
  (WEFE's behaviour, ``pairing='wefe'``): if T2 then has fewer words than T1, WEFE
  raises a bare IndexError; here ``RipaPairingError`` names the query and the words.
  ``pairing='query'`` instead pairs by the positions in the query and drops a pair
  when either word is missing -- the pairing the paper means.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from .lookup import QueryLookup
from .wefe_math import check_lookup, cosine_distance_matrix, cosine_matrix, nan_result

__all__ = ["RipaPairingError", "ect", "mac", "ripa", "rnd"]


class RipaPairingError(IndexError):
    """RIPA's T2 has fewer found words than T1, so position i has no partner."""


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
