"""Cosines as WEFE 1.0.1 computes them, on whole matrices.

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

import numpy as np

__all__ = ["cosine_distance_matrix", "cosine_matrix"]


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
