"""L2-regularised logistic regression as liblinear solves it (solver 0, L2R_LR).

RNSB's reference is ``sklearn.linear_model.LogisticRegression(solver='liblinear')``
with its defaults: ``C = 1``, ``tol = 1e-4``, ``fit_intercept=True``,
``intercept_scaling = 1``. liblinear then minimises, over w with the intercept as an
extra weight on a constant feature 1,

    f(w) = 0.5 * ||w||^2 + C * sum_i log(1 + exp(-y_i * w . x_i))

so the intercept is *regularised like every other weight* (the liblinear quirk; a
textbook logistic regression leaves it free). Two solvers, both written here:

``fit_logistic_tron`` (default, fidelity)
    liblinear's trust-region Newton method (Lin, Weng & Keerthi 2008, "Trust region
    Newton method for large-scale logistic regression", JMLR 9), as the copy bundled
    with scikit-learn runs it: start at w = 0, inner conjugate gradient to a residual
    of 0.1 * ||g||, truncated at the trust-region boundary, the same radius update
    constants, and liblinear's *early* stop at ``||g|| <= eps * ||g(0)||`` with
    ``eps = tol * max(min(n_pos, n_neg), 1) / n``. Replaying the same steps lands on
    the same (not fully converged) weights, so probabilities agree with sklearn to
    about 1e-9, where the optimum itself is up to ~5e-4 away (Bing Liu lexicon).
``fit_logistic_exact``
    Newton's method to the true optimum (gradient norm 1e-10 of its start). Use it
    when the answer should not depend on a solver's stopping rule.

Both reorder the training rows as liblinear does (grouped by class, -1 first, each
group in input order), which only affects float summation order.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["fit_logistic_exact", "fit_logistic_tron", "liblinear_order"]


def liblinear_order(y: np.ndarray) -> np.ndarray:
    """Row order liblinear trains on: class -1 rows, then class +1 rows, each stable."""
    return np.argsort(np.asarray(y) > 0, kind="stable")


def _with_bias(x: np.ndarray) -> np.ndarray:
    return np.hstack([np.asarray(x, np.float64), np.ones((x.shape[0], 1))])


class _Objective:
    """f, gradient and Hessian-vector products of the liblinear L2R_LR problem."""

    def __init__(self, xt: np.ndarray, y: np.ndarray, c: float):
        self.xt, self.y, self.c = xt, y, c
        self.curvature = np.zeros(len(y))

    def value(self, w: np.ndarray) -> float:
        yz = self.y * (self.xt @ w)
        # liblinear's two-branch form of log(1 + exp(-yz)), stable for either sign
        loss = np.where(
            yz >= 0, np.log(1.0 + np.exp(-np.abs(yz))), -yz + np.log(1.0 + np.exp(-np.abs(yz)))
        )
        return float(0.5 * (w @ w) + self.c * np.sum(loss))

    def gradient(self, w: np.ndarray) -> np.ndarray:
        """Also stores the curvature D_i = p_i (1 - p_i) used by ``hess_dot``."""
        p = 1.0 / (1.0 + np.exp(-self.y * (self.xt @ w)))
        self.curvature = p * (1.0 - p)
        return w + self.xt.T @ (self.c * (p - 1.0) * self.y)

    def hess_dot(self, v: np.ndarray) -> np.ndarray:
        return v + self.xt.T @ (self.c * self.curvature * (self.xt @ v))


def _truncated_cg(obj: _Objective, g: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """CG on H s = -g until ||r|| <= 0.1 ||g||, or up to the trust-region boundary."""
    s = np.zeros_like(g)
    r = -g
    d = r.copy()
    tol = 0.1 * np.linalg.norm(g)
    rr = r @ r
    while np.linalg.norm(r) > tol:
        hd = obj.hess_dot(d)
        alpha = rr / (d @ hd)
        s = s + alpha * d
        if np.linalg.norm(s) > delta:
            s = s - alpha * d  # step back, then go exactly to the boundary along d
            sd, ss, dd = s @ d, s @ s, d @ d
            rad = math.sqrt(sd * sd + dd * (delta * delta - ss))
            alpha = (delta * delta - ss) / (sd + rad) if sd >= 0 else (rad - sd) / dd
            s = s + alpha * d
            r = r - alpha * hd
            break
        r = r - alpha * hd
        rr_new = r @ r
        d = d * (rr_new / rr) + r
        rr = rr_new
    return s, r


def fit_logistic_tron(
    x: np.ndarray, y: np.ndarray, c: float = 1.0, tol: float = 1e-4, max_iter: int = 10000
) -> tuple[np.ndarray, float]:
    """liblinear's TRON, step for step; returns ``(coef, intercept)`` for class +1."""
    y = np.asarray(y, np.float64)
    order = liblinear_order(y)
    obj = _Objective(_with_bias(x)[order], y[order], c)
    n_pos = int(np.count_nonzero(y > 0))
    eps = tol * max(min(n_pos, len(y) - n_pos), 1) / len(y)
    eta0, eta1, eta2 = 1e-4, 0.25, 0.75
    sigma1, sigma2, sigma3 = 0.25, 0.5, 4.0

    w = np.zeros(obj.xt.shape[1])
    f = obj.value(w)
    g = obj.gradient(w)
    delta = gnorm0 = float(np.linalg.norm(g))
    it = 1
    while it <= max_iter and gnorm0 > eps * gnorm0:
        s, r = _truncated_cg(obj, g, delta)
        w_new = w + s
        gs = float(g @ s)
        predicted = -0.5 * (gs - float(s @ r))
        f_new = obj.value(w_new)
        actual = f - f_new
        snorm = float(np.linalg.norm(s))
        if it == 1:
            delta = min(delta, snorm)
        alpha = sigma3 if f_new - f - gs <= 0 else max(sigma1, -0.5 * (gs / (f_new - f - gs)))
        if actual < eta0 * predicted:
            delta = min(max(alpha, sigma1) * snorm, sigma2 * delta)
        elif actual < eta1 * predicted:
            delta = max(sigma1 * delta, min(alpha * snorm, sigma2 * delta))
        elif actual < eta2 * predicted:
            delta = max(sigma1 * delta, min(alpha * snorm, sigma3 * delta))
        else:
            delta = max(delta, min(alpha * snorm, sigma3 * delta))
        if actual > eta0 * predicted:
            it += 1
            w, f = w_new, f_new
            g = obj.gradient(w)
            if np.linalg.norm(g) <= eps * gnorm0:
                break
        if f < -1.0e32 or (abs(actual) <= 0 and predicted <= 0):
            break
        if abs(actual) <= 1.0e-12 * abs(f) and abs(predicted) <= 1.0e-12 * abs(f):
            break
    return w[:-1], float(w[-1])


def _newton_direction(obj: _Objective, g: np.ndarray) -> np.ndarray:
    """Solve (I + C X^T D X) step = -g in whichever space is smaller.

    More samples than weights: the (d x d) system by Cholesky. Otherwise the Woodbury
    identity on ``I + S X X^T S`` with ``S = sqrt(C D)``, whose eigenvalues are >= 1,
    so it stays well conditioned however small D gets.
    """
    from scipy.linalg import cho_factor, cho_solve  # imported here: scipy.linalg costs ~0.4 s at start-up

    xt, cd = obj.xt, obj.c * obj.curvature
    n, d = xt.shape
    if d <= n:
        h = xt.T @ (xt * cd[:, None])
        h[np.diag_indices(d)] += 1.0
        return -cho_solve(cho_factor(h), g)
    xs = xt * np.sqrt(cd)[:, None]
    k = xs @ xs.T
    k[np.diag_indices(n)] += 1.0
    return -(g - xs.T @ cho_solve(cho_factor(k), xs @ g))


def fit_logistic_exact(
    x: np.ndarray, y: np.ndarray, c: float = 1.0, rtol: float = 1e-10, max_iter: int = 100
) -> tuple[np.ndarray, float]:
    """The same objective solved to its optimum by damped Newton (Armijo backtracking).

    Stops when the gradient norm falls below ``rtol`` times its start, or when the
    Newton decrement says f is within 1e-20 (relative) of its minimum -- float64 cannot
    resolve more. As H >= I, the weights are then within ||g|| of the optimum.
    """
    y = np.asarray(y, np.float64)
    order = liblinear_order(y)
    obj = _Objective(_with_bias(x)[order], y[order], c)
    w = np.zeros(obj.xt.shape[1])
    f = obj.value(w)
    g = obj.gradient(w)
    gnorm0 = max(float(np.linalg.norm(g)), 1.0)
    for _ in range(max_iter):
        if np.linalg.norm(g) <= rtol * gnorm0:
            break
        step = _newton_direction(obj, g)
        slope = float(g @ step)
        if -slope <= 1e-20 * max(1.0, abs(f)):  # Newton decrement below float resolution
            break
        t = 1.0
        while True:
            f_new = obj.value(w + t * step)
            if f_new <= f + 1e-4 * t * slope:
                break
            t *= 0.5
            if t < 1e-12:  # no decrease left at float precision
                return w[:-1], float(w[-1])
        w, f = w + t * step, f_new
        g = obj.gradient(w)
    else:
        raise RuntimeError(f"logistic regression: no convergence in {max_iter} Newton steps")
    return w[:-1], float(w[-1])
