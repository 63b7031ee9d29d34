"""Shared numerics of the WEFE metrics: templates, cosines, NaN results.

WEFE 1.0.1 gets its cosines from two libraries, with different rounding:

* ``sklearn.metrics.pairwise.cosine_similarity`` (WEAT, RND-cos): rows are
  L2-normalised in the input dtype, then multiplied; on float32 embeddings the whole
  computation is float32. WEAT then averages those float32 cosines in float64.
* ``scipy.spatial.distance.cosine`` (MAC, ECT): float32 dot products ``uv``, ``uu``,
  ``vv``, then ``1 - uv / sqrt(uu * vv)`` promoted to float64 (numpy 1.26 promotes a
  float32 scalar divided by a Python float to float64), then ``abs`` (scipy 1.12).

``cosine_matrix`` and ``cosine_distance_matrix`` reproduce those two recipes on whole
matrices, so results agree with WEFE to about 1e-7 (float32 BLAS kernels may differ
in the last bit) while being computed once per (target set, attribute set) pair.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .lookup import QueryLookup

__all__ = [
    "TEMPLATES",
    "TemplateError",
    "check_template",
    "cosine_distance_matrix",
    "cosine_matrix",
    "nan_result",
]

#: (n_targets, n_attributes) per metric; ``"n"`` means one or more.
TEMPLATES: Mapping[str, tuple[int | str, int | str]] = {
    "WEAT": (2, 2),
    "RND": (2, 1),
    "RNSB": ("n", 2),
    "MAC": ("n", "n"),
    "ECT": (2, 1),
    "RIPA": (2, 1),
}

#: WEFE's keys of the NaN result per metric, with their NaN-case values.
_NAN_FIELDS: Mapping[str, dict[str, Any]] = {
    "WEAT": {"weat": math.nan, "effect_size": math.nan, "p_value": math.nan},
    "RND": {"rnd": math.nan, "distance_by_word": {}},
    "RNSB": {
        "rnsb": math.nan,
        "negative_sentiment_probabilities": {},
        "negative_sentiment_distribution": {},
    },
    "MAC": {"mac": math.nan, "targets_eval": {}},
    "ECT": {"ect": math.nan},
    "RIPA": {"ripa": math.nan, "word_values": math.nan},
}


class TemplateError(ValueError):
    """A query whose number of target / attribute sets a metric cannot take."""


def _fits(expected: int | str, given: int) -> bool:
    return given >= 1 if expected == "n" else given == expected


def _say(expected: int | str) -> str:
    return "one or more" if expected == "n" else str(expected)


def check_template(metric: str, query_name: str, given: tuple[int, int]) -> None:
    """Raise ``TemplateError`` unless ``given`` = (n_targets, n_attributes) fits ``metric``.

    Graph building calls this before any model is loaded, so a (3, 2) query bound to
    WEAT fails at once with the metric, the query and both cardinalities named.
    """
    try:
        expected = TEMPLATES[metric]
    except KeyError:
        raise ValueError(f"unknown WEFE metric {metric!r}; known: {sorted(TEMPLATES)}") from None
    n_t, n_a = given
    if _fits(expected[0], n_t) and _fits(expected[1], n_a):
        return
    raise TemplateError(
        f"{metric} takes {_say(expected[0])} target set(s) and {_say(expected[1])} attribute "
        f"set(s) (template {expected}); query '{query_name}' has {n_t} target set(s) and "
        f"{n_a} attribute set(s) (template {(n_t, n_a)})"
    )


def check_lookup(metric: str, lookup: QueryLookup) -> None:
    if not isinstance(lookup, QueryLookup):
        raise TypeError(
            f"{metric} takes a QueryLookup (see lookup_query), got {type(lookup).__name__}"
        )
    check_template(metric, lookup.query_name, lookup.template)


def nan_result(metric: str, lookup: QueryLookup, reason: str | None = None) -> dict[str, Any]:
    """WEFE's NaN result for ``metric`` plus the ``reason`` WEFE only logs.

    One deliberate addition: WEAT's NaN result has ``p_value`` (WEFE's lacks it, which
    makes ``result["p_value"]`` raise KeyError, WEFE issue #21).
    """
    out: dict[str, Any] = {"query_name": lookup.query_name, "result": math.nan}
    for key, value in _NAN_FIELDS[metric].items():
        out[key] = value.copy() if isinstance(value, dict) else value
    out["reason"] = reason or lookup.reason
    return out


def _l2_normalize_rows_like_sklearn(x: np.ndarray) -> np.ndarray:
    # sklearn.preprocessing.normalize: sqrt(einsum row sums of squares) in the input
    # dtype, norms below 10 * eps (zero vectors) replaced by 1, then an in-dtype division.
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    norms[norms < 10 * np.finfo(norms.dtype).eps] = 1.0
    return x / norms[:, None]


def cosine_matrix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``cosine_similarity(x, y)`` as sklearn computes it (float32 in, float32 out)."""
    x = np.atleast_2d(np.asarray(x))
    y = np.atleast_2d(np.asarray(y))
    dtype = np.float32 if x.dtype == np.float32 and y.dtype == np.float32 else np.float64
    xn = _l2_normalize_rows_like_sklearn(x.astype(dtype, copy=False))
    yn = _l2_normalize_rows_like_sklearn(y.astype(dtype, copy=False))
    return xn @ yn.T


def cosine_distance_matrix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``scipy.spatial.distance.cosine`` (scipy 1.12) for every row pair, float64.

    Dot products stay in the input dtype (float32 for embeddings), the ratio is taken
    in float64, and the absolute value guards tiny negatives, as scipy 1.12 does.
    """
    x = np.atleast_2d(np.asarray(x))
    y = np.atleast_2d(np.asarray(y))
    uv = x @ y.T
    uu = np.einsum("ij,ij->i", x, x)
    vv = np.einsum("ij,ij->i", y, y)
    prod = uu[:, None] * vv[None, :]  # same dtype as the inputs, like uu * vv in scipy
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.abs(1.0 - uv.astype(np.float64) / np.sqrt(prod.astype(np.float64)))
