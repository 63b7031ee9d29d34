"""RNSB (Sweeney & Najafian 2019) as WEFE 1.0.1 computes it, without scikit-learn.

WEFE trains ``LogisticRegression(solver='liblinear', max_iter=10000)`` on the first
attribute set (label +1, "positive") against the second (label -1, "negative"), by
default on a stratified, shuffled 80/20 holdout split; takes each target word's
probability of the negative class, normalises those to a distribution p and returns
``KL(p || uniform)``. With ``n_iterations > 1`` it repeats the split and fit, averages
the divergences and averages the per-word probabilities.

Two pieces of scikit-learn are reproduced here instead of depending on it:

``stratified_holdout``
    ``train_test_split(shuffle=True, test_size=0.2, stratify=y, random_state=rs)``,
    i.e. one ``StratifiedShuffleSplit`` draw: ``n_test = ceil(0.2 n)``; per-class
    train/test counts by the "approximate mode" (floors, remainders handed out in
    descending order, ties broken by ``rng.choice(..., replace=False)``); one
    ``rng.permutation`` per class (classes in sorted label order: -1 first); then
    the train and test index lists are each permuted. Same calls on the same
    ``numpy.random.RandomState``, so the same split.
``logistic.fit_logistic_tron``
    liblinear's L2-regularised logistic regression (``C = 1``, intercept as a
    *regularised* weight on a constant feature, ``intercept_scaling = 1``) solved by
    a replay of liblinear's trust-region Newton method, early stop included, so the
    weights -- not just the optimum -- are sklearn's (``solver='liblinear'``, the
    default). ``solver='exact'`` solves the same problem to its optimum instead; it
    differs from WEFE by liblinear's early stop (divergence up to 2e-5 off on the WEAT
    word sets and 5e-5 on the Bing Liu lexicon, where per-word probabilities move by
    up to 5e-4). See ``logistic.py``.

Randomness: one ``numpy.random.RandomState(random_state)`` stream is consumed in
WEFE's order -- per iteration the split's draws, then the one ``randint`` sklearn
takes to seed liblinear. So ``n_iterations=1, random_state=s`` equals WEFE's
``random_state=s``, and ``n_iterations=k, random_state=s`` equals WEFE after
``np.random.seed(s)`` with ``random_state=None`` (WEFE refuses a seed with k > 1).
``random_state=None`` draws a fresh seed, and the result records the seed it drew in
``random_state``, so even that run can be replayed. A ``numpy.random.RandomState`` is
consumed as it is: the WEFE facade's unseeded RNSB passes numpy's global one, as WEFE's
scikit-learn calls do, so ``np.random.seed(s)`` before the call gives WEFE's numbers.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ...engine import Params, Result
from .logistic import fit_logistic_exact, fit_logistic_tron
from .lookup import QueryLookup
from .registry import as_result, check_lookup, fairness_metric, nan_result
from .word_sets import VERSION, lookup_from_value

__all__ = ["RnsbIterationError", "RnsbParams", "predict_negative_proba", "rnsb", "stratified_holdout"]

SOLVERS = {"liblinear": fit_logistic_tron, "exact": fit_logistic_exact}

_LIBLINEAR_SEED_HIGH = 2**31 - 1  # np.iinfo("i").max, the bound of sklearn's randint


class RnsbIterationError(ValueError):
    """One RNSB iteration cannot run (a split leaves a class without training words)."""


def _approximate_mode(counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Per-class draw counts: floors of the proportional share, remainders by size."""
    continuous = counts / counts.sum() * n_draws
    floored = np.floor(continuous)
    need = int(n_draws - floored.sum())
    if need > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (candidates,) = np.where(remainder == value)
            take = min(len(candidates), need)
            chosen = rng.choice(
                candidates, size=take, replace=False
            )  # consumes rng even if take == all
            floored[chosen] += 1
            need -= take
            if need == 0:
                break
    return floored.astype(int)


def stratified_holdout(
    labels: np.ndarray, rng: np.random.RandomState, test_size: float = 0.2
) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices, as sklearn's stratified ``train_test_split``."""
    labels = np.asarray(labels)
    n = labels.shape[0]
    n_test = math.ceil(test_size * n)
    n_train = n - n_test
    classes, y_idx, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if counts.min() < 2:
        raise RnsbIterationError(
            f"holdout split: class {classes[counts.argmin()]:+g} has {counts.min()} word(s); "
            f"a stratified split needs at least 2 per class"
        )
    if n_train < len(classes) or n_test < len(classes):
        raise RnsbIterationError(
            f"holdout split of {n} words gives {n_train} train / {n_test} test, "
            f"fewer than the {len(classes)} classes"
        )
    members = np.split(np.argsort(y_idx, kind="stable"), np.cumsum(counts)[:-1])
    n_i = _approximate_mode(counts, n_train, rng)
    t_i = _approximate_mode(counts - n_i, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for i in range(len(classes)):
        order = members[i].take(rng.permutation(counts[i]), mode="clip")
        train.extend(order[: n_i[i]])
        test.extend(order[n_i[i] : n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(test)


def predict_negative_proba(x: np.ndarray, coef: np.ndarray, intercept: float) -> np.ndarray:
    """P(class -1) as sklearn's ``predict_proba[:, 0]``: ``1 - expit(decision)``."""
    from scipy.special import expit  # imported here: scipy.special costs ~0.4 s at start-up

    return 1.0 - expit(np.asarray(x, np.float64) @ coef + intercept)


def _one_iteration(
    pos: np.ndarray,
    neg: np.ndarray,
    targets: np.ndarray,
    holdout: bool,
    rng: np.random.RandomState,
    solver: str,
) -> tuple[float, np.ndarray, float]:
    x = np.concatenate([pos, neg])
    y = np.concatenate([np.ones(len(pos)), -np.ones(len(neg))])
    if holdout:
        train, test = stratified_holdout(y, rng)
        n_pos = int(np.count_nonzero(y[train] == 1))
        n_neg = int(np.count_nonzero(y[train] == -1))
        if n_pos == 1:  # WEFE's check (its message says 0; the test is == 1)
            raise RnsbIterationError(
                "after the holdout split the first attribute set has 1 training word"
            )
        if n_neg < 1:
            raise RnsbIterationError(
                "after the holdout split the second attribute set has no training word"
            )
        x_fit, y_fit, x_eval, y_eval = x[train], y[train], x[test], y[test]
    else:
        x_fit, y_fit, x_eval, y_eval = x, y, x, y
    rng.randint(_LIBLINEAR_SEED_HIGH)  # sklearn draws liblinear's seed here
    coef, intercept = SOLVERS[solver](x_fit, y_fit)
    accuracy = float(np.mean(np.where(x_eval @ coef + intercept > 0, 1.0, -1.0) == y_eval))
    p_neg = predict_negative_proba(targets, coef, intercept)
    p = p_neg / np.sum(p_neg)
    from scipy.stats import entropy  # imported here: scipy.stats costs ~0.5 s at start-up

    kl = float(entropy(p, np.full(p.shape[0], 1.0 / p.shape[0])))
    return kl, p_neg, accuracy


def rnsb(
    lookup: QueryLookup,
    *,
    random_state: int | np.random.RandomState | None = None,
    holdout: bool = True,
    n_iterations: int = 1,
    solver: str = "liblinear",
) -> dict[str, Any]:
    """RNSB with WEFE's result keys, plus ``classifier_accuracy`` and ``dropped_iterations``.

    Per-word probabilities are keyed by word, so a word in two target sets appears once
    (its last value), while the divergence uses every occurrence -- as in WEFE. An
    iteration that cannot run is dropped and recorded in ``dropped_iterations`` (WEFE
    logs and drops it); if all are dropped the result is NaN with a reason.
    """
    check_lookup("RNSB", lookup)
    if isinstance(n_iterations, bool) or not isinstance(n_iterations, int) or n_iterations < 1:
        raise ValueError(f"n_iterations must be a positive int, got {n_iterations!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {sorted(SOLVERS)}, got {solver!r}")
    if not isinstance(holdout, bool):
        raise TypeError(f"holdout must be a bool, got {holdout!r}")
    if not lookup.ok:
        return nan_result("RNSB", lookup)
    pos, neg = (a.vectors for a in lookup.attributes)
    targets = np.concatenate([t.vectors for t in lookup.targets])
    words = [w for t in lookup.targets for w in t.found]
    if isinstance(random_state, np.random.RandomState):  # a stream to consume, e.g. numpy's global one
        seed, rng = None, random_state
    else:
        seed = random_state if random_state is not None else int(np.random.SeedSequence().generate_state(1)[0])
        rng = np.random.RandomState(seed)
    kls: list[float] = []
    per_word: dict[str, list[float]] = {}
    accuracy: list[float] = []
    dropped: list[str] = []
    for i in range(n_iterations):
        try:
            kl, p_neg, acc = _one_iteration(pos, neg, targets, holdout, rng, solver)
        except RnsbIterationError as exc:
            dropped.append(f"iteration {i}: {exc}")
            continue
        kls.append(kl)
        accuracy.append(acc)
        for w, p in dict(zip(words, p_neg.tolist(), strict=True)).items():
            per_word.setdefault(w, []).append(p)
    if not kls:
        out = nan_result(
            "RNSB",
            lookup,
            f"query '{lookup.query_name}': every RNSB iteration was dropped ({'; '.join(dropped)})",
        )
        out["dropped_iterations"] = dropped
        return out
    probabilities = {w: float(np.mean(v)) for w, v in per_word.items()}
    total = float(np.sum(list(probabilities.values())))
    value = float(np.mean(kls))
    return {
        "query_name": lookup.query_name,
        "result": value,
        "rnsb": value,
        "negative_sentiment_probabilities": probabilities,
        "negative_sentiment_distribution": {w: p / total for w, p in probabilities.items()},
        "classifier_accuracy": accuracy,
        "dropped_iterations": dropped,
        "random_state": seed,
    }


# -- the node (its one declaration: engine metric and registry entry) -------------------------
class RnsbParams(Params):
    random_state: int | None = 0  # None: a seed drawn once, recorded, then cached like any
    holdout: bool = True
    n_iterations: int = Field(1, ge=1)
    solver: Literal["liblinear", "exact"] = "liblinear"


@fairness_metric("RNSB", node="wefe_rnsb", version=VERSION, params=RnsbParams, template=("n", 2), order=30, nan_fields={
    "rnsb": math.nan, "negative_sentiment_probabilities": {}, "negative_sentiment_distribution": {}})
def rnsb_node(lookup: dict[str, Any], params: RnsbParams) -> Result:
    """Relative Negative Sentiment Bias: KL divergence of P(negative) over target words."""
    return as_result(rnsb(
        lookup_from_value(lookup), random_state=params.random_state, holdout=params.holdout,
        n_iterations=params.n_iterations, solver=params.solver,
    ))
