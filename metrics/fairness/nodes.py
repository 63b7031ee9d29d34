"""WEFE's metrics as graph nodes, with the work they share as nodes of their own.

The layout, from the vectors up (builders in ``graph_build.py`` wire it; nothing here
decides which queries or metrics run)::

    wefe_word_set(words)      one per (word set, lookup settings): found / missing words and
                              their vectors; needs the ``embeddings`` resource (or, in
                              hf_embeddings.py, a model's input embeddings)
    wefe_lookup(query)        one per query: its sets, named, under the lost-vocabulary
                              rule; the NaN ``reason`` is decided here, once
    wefe_cosine(T, A)         one per (target set, attribute set)
    wefe_weat_s(T, A, B)      s(w, A, B) for every word of T, from two cosine nodes
    wefe_weat_effect_size, wefe_weat_p_value, wefe_weat
                              WEAT's pieces, all reading the same two s vectors
    wefe_rnd, wefe_rnsb, wefe_mac, wefe_ect, wefe_ripa
                              the other metrics, on the query's lookup

Set, cosine and s nodes know nothing of queries: their identity is the words and the
vectors, so every query that uses the same set with the same settings reads the same
vertex (WEAT 6 to 8 reuse attribute sets; a user's queries reuse far more). A metric
node returns a :class:`Result`: ``agg_value`` is WEFE's ``result``, ``extra`` holds
WEFE's other keys (and ours: per-word contributions, the p-value method), ``reason``
says why a value is NaN.

Numbers come from the phase-1 functions (``weat.py``, ``vector_metrics.py``,
``rnsb.py``) on the same float32 vectors, so the graph agrees with WEFE exactly as
closely as they do (docs/fairness-notes.md).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ...engine import Params, Result, metric
from .lookup import Query, SetLookup, lookup_query
from .node_values import as_result, lookup_from_value, lookup_value, set_value
from .rnsb import rnsb
from .vector_metrics import ect, mac, ripa, rnd
from .weat import (
    MAX_EXACT_SPLITS,
    n_splits,
    s_from_cosines,
    weat_effect_size,
    weat_p_value_exact,
    weat_p_value_monte_carlo,
    weat_p_value_wefe,
    weat_score,
)
from .wefe_math import cosine_matrix, nan_result
from .word_vectors import WordVectors

__all__ = ["VERSION", "WordSetParams", "lookup_set"]

VERSION = "1"


def _given(params: Any) -> dict[str, Any]:
    """Parents that depend on the query are given per node by graph_build, never defaulted.

    (Declaring parents as a function defers the engine's argument check to graph
    building, where every parent is known.)
    """
    return {}


# -- word sets -----------------------------------------------------------------------------
class WordSetParams(Params):
    """One word set and what the lookup settings make of it.

    ``variants[i][j]`` is the key preprocessor i makes of word j (None: the words
    themselves, i.e. WEFE's default ``[{}]``). Names and roles are not here: a set
    node serves every query, as target or attribute, that uses these words.
    """

    words: tuple[str, ...] = Field(min_length=1)
    variants: tuple[tuple[str, ...], ...] | None = None
    strategy: Literal["first", "all"] = "first"
    normalize: bool = False


def _preprocessors(words: tuple[str, ...], variants: Any) -> list[dict[str, Any]]:
    """The variants as WEFE preprocessor dicts: one lookup table per preprocessor."""
    if variants is None:
        return [{}]
    return [{"preprocessor": dict(zip(words, v, strict=True)).__getitem__} for v in variants]


def lookup_set(vectors: WordVectors, params: WordSetParams) -> SetLookup:
    """WEFE's lookup of one set (the phase-1 ``lookup_query`` on a one-set query)."""
    lk = lookup_query(
        vectors,
        Query([params.words]),
        lost_vocabulary_threshold=1.0,  # the rule is the query's business (wefe_lookup)
        preprocessors=_preprocessors(params.words, params.variants),
        strategy=params.strategy,
        normalize=params.normalize,
    )
    return lk.targets[0]


@metric("wefe_word_set", version=VERSION, params=WordSetParams, needs=("embeddings",))
def word_set(embeddings: WordVectors, params: WordSetParams) -> dict[str, Any]:
    """Found and missing words of one set, and the vectors found (normalised if asked)."""
    return set_value(lookup_set(embeddings, params), params.variants)


# -- one query -------------------------------------------------------------------------------
class LookupParams(Params):
    """A query's set names (in order) and the rule that makes it NaN."""

    target_names: tuple[str, ...] = Field(min_length=1)
    attribute_names: tuple[str, ...] = ()
    lost_vocabulary_threshold: float = Field(0.2, ge=0.0, le=1.0)
    strategy: Literal["first", "all"] = "first"
    settings: dict[str, Any] = {}  # how the words were preprocessed, for the report


def _found_vocabulary(sets: list[dict[str, Any]]) -> WordVectors:
    rows: dict[str, np.ndarray] = {}
    for s in sets:
        rows.update(zip(s["found"], np.asarray(s["vectors"], np.float32), strict=True))
    dim = int(np.asarray(sets[0]["vectors"]).shape[1])
    matrix = np.stack(list(rows.values())) if rows else np.zeros((0, dim), np.float32)
    return WordVectors(list(rows), matrix, source="<found words>")


@metric("wefe_lookup", version=VERSION, params=LookupParams)
def query_lookup(params: LookupParams, **sets: dict[str, Any]) -> dict[str, Any]:
    """Found / missing words per named set, and why the query is NaN if it is.

    Parents are the set nodes ``t0, t1, …`` and ``a0, a1, …``. The lost-vocabulary
    rule is the phase-1 ``lookup_query`` itself, run on a vocabulary made of exactly
    the words the set nodes found: lookups only ever ask about the query's own keys,
    so that vocabulary answers every one of them as the full embeddings would, and
    the reason text is the phase-1 one. (Vectors arrive already normalised, hence
    ``normalize=False`` here.)
    """
    targets = [sets[f"t{i}"] for i in range(len(params.target_names))]
    attributes = [sets[f"a{i}"] for i in range(len(params.attribute_names))]
    every = targets + attributes
    query = Query(
        [s["words"] for s in targets], [s["words"] for s in attributes],
        params.target_names, params.attribute_names,
    )
    n_pre = len(every[0]["variants"] or [None])
    preprocessors = []
    for i in range(n_pre):  # one table over the whole query: a word maps alike in every set
        table: dict[str, str] = {}
        for s in every:
            keys = s["variants"][i] if s["variants"] is not None else s["words"]
            table.update(zip(s["words"], keys, strict=True))
        preprocessors.append({"preprocessor": table.__getitem__})
    lk = lookup_query(
        _found_vocabulary(every), query,
        lost_vocabulary_threshold=params.lost_vocabulary_threshold,
        preprocessors=preprocessors, strategy=params.strategy, normalize=False,
    )
    return lookup_value(lk, params.settings)


# -- shared intermediates -------------------------------------------------------------------
@metric("wefe_cosine", version=VERSION, parents=_given)
def cosine(x: dict[str, Any], y: dict[str, Any]) -> np.ndarray:
    """cos(x_i, y_j) for every found word of set x and of set y (sklearn's float32 recipe)."""
    a, b = np.asarray(x["vectors"]), np.asarray(y["vectors"])
    if not (len(a) and len(b)):  # a set with no word found: nothing to compare (the lookup says why)
        return np.zeros((len(a), len(b)), np.float32)
    return cosine_matrix(a, b)


@metric("wefe_weat_s", version=VERSION, parents=_given)
def weat_s(cos_a: np.ndarray, cos_b: np.ndarray) -> np.ndarray:
    """WEAT's s(w, A, B) = mean_a cos(w, a) - mean_b cos(w, b) for every word w of T."""
    with warnings.catch_warnings():  # an empty set gives NaN; the lookup says why
        warnings.simplefilter("ignore", RuntimeWarning)
        return s_from_cosines(cos_a, cos_b)


# -- WEAT --------------------------------------------------------------------------------------
def _nan_unless_ok(lookup: dict[str, Any]) -> Result | None:
    return None if lookup["reason"] is None else Result.nan(lookup["reason"])


@metric("wefe_weat_effect_size", version=VERSION, parents=_given)
def weat_effect_size_node(lookup: dict[str, Any], s1: np.ndarray, s2: np.ndarray) -> Result:
    """(mean s over T1 - mean s over T2) / population std of s over T1 + T2."""
    return _nan_unless_ok(lookup) or Result(weat_effect_size(s1, s2))


class PValueParams(Params):
    """A permutation p-value for WEAT; the seed is a param, so results are cached."""

    method: Literal["auto", "exact", "monte_carlo", "wefe"] = "auto"
    test_type: Literal["right-sided", "left-sided", "two-sided"] = "right-sided"
    iterations: int = Field(10000, ge=1)
    random_state: int | None = 0
    max_exact_splits: int = Field(MAX_EXACT_SPLITS, ge=1)


@metric("wefe_weat_p_value", version=VERSION, parents=_given, params=PValueParams)
def weat_p_value_node(lookup: dict[str, Any], s1: np.ndarray, s2: np.ndarray, params: PValueParams) -> Result:
    """Exact when the splits are few, seeded Monte Carlo otherwise, or WEFE's own sampler.

    The same choice and the same phase-1 functions as ``weat.weat``, but on the cached
    s vectors: an exact test over C(16, 8) splits takes milliseconds.
    """
    nan = _nan_unless_ok(lookup)
    if nan is not None:
        return nan
    method = params.method
    if method == "auto":
        method = "exact" if n_splits(len(s1), len(s2)) <= params.max_exact_splits else "monte_carlo"
    if method == "exact":
        p = weat_p_value_exact(s1, s2, params.test_type, params.max_exact_splits)
    elif method == "monte_carlo":
        p = weat_p_value_monte_carlo(s1, s2, params.iterations, params.random_state, params.test_type)
    else:
        t1, t2 = lookup["targets"]
        p = weat_p_value_wefe(
            t1["found"], s1, t2["found"], s2, weat_score(s1, s2),
            params.iterations, params.random_state, params.test_type,
        )
    seeded = method != "exact"
    return Result(p, extra={
        "method": method,
        "test_type": params.test_type,
        "iterations": params.iterations if seeded else None,
        "random_state": params.random_state if seeded else None,
    })


class WeatParams(Params):
    return_effect_size: bool = False


@metric("wefe_weat", version=VERSION, parents=_given, params=WeatParams)
def weat_node(
    lookup: dict[str, Any], s1: np.ndarray, s2: np.ndarray, effect_size: Result,
    params: WeatParams, p_value: Result | None = None,
) -> Result:
    """WEFE's WEAT result: the sum-form statistic (or the effect size), and the p-value."""
    lk = lookup_from_value(lookup)
    if not lk.ok:
        return as_result(nan_result("WEAT", lk))
    stat = weat_score(s1, s2)
    es = float(effect_size.agg_value)
    (t1, t2) = lk.targets
    return Result(es if params.return_effect_size else stat, extra={
        "query_name": lk.query_name,
        "weat": stat,
        "effect_size": es,
        "p_value": math.nan if p_value is None else float(p_value.agg_value),
        "p_value_method": None if p_value is None else p_value.extra["method"],
        "p_value_test_type": None if p_value is None else p_value.extra["test_type"],
        "p_value_random_state": None if p_value is None else p_value.extra["random_state"],
        "s_by_word": {
            t1.name: dict(zip(t1.found, np.asarray(s1).tolist(), strict=True)),
            t2.name: dict(zip(t2.found, np.asarray(s2).tolist(), strict=True)),
        },
    })


# -- the other metrics ---------------------------------------------------------------------------
class RndParams(Params):
    distance: Literal["norm", "cos"] = "norm"


@metric("wefe_rnd", version=VERSION, parents=_given, params=RndParams)
def rnd_node(lookup: dict[str, Any], params: RndParams) -> Result:
    """Relative Norm Distance ('norm': Euclidean; 'cos': cosine *similarity*, WEFE's naming)."""
    return as_result(rnd(lookup_from_value(lookup), distance=params.distance))


class RnsbParams(Params):
    random_state: int | None = 0  # None: a seed drawn once, recorded, then cached like any
    holdout: bool = True
    n_iterations: int = Field(1, ge=1)
    solver: Literal["liblinear", "exact"] = "liblinear"


@metric("wefe_rnsb", version=VERSION, parents=_given, params=RnsbParams)
def rnsb_node(lookup: dict[str, Any], params: RnsbParams) -> Result:
    """Relative Negative Sentiment Bias: KL divergence of P(negative) over target words."""
    return as_result(rnsb(
        lookup_from_value(lookup), random_state=params.random_state, holdout=params.holdout,
        n_iterations=params.n_iterations, solver=params.solver,
    ))


@metric("wefe_mac", version=VERSION, parents=_given)
def mac_node(lookup: dict[str, Any]) -> Result:
    """Mean Average Cosine: the mean cosine *distance* of target words to attribute sets."""
    return as_result(mac(lookup_from_value(lookup)))


@metric("wefe_ect", version=VERSION, parents=_given)
def ect_node(lookup: dict[str, Any]) -> Result:
    """Embedding Coherence Test: Spearman's rho of the two targets' similarity profiles."""
    return as_result(ect(lookup_from_value(lookup)))


class RipaParams(Params):
    pairing: Literal["wefe", "query"] = "wefe"


@metric("wefe_ripa", version=VERSION, parents=_given, params=RipaParams)
def ripa_node(lookup: dict[str, Any], params: RipaParams) -> Result:
    """Relational Inner Product Association over paired target words."""
    return as_result(ripa(lookup_from_value(lookup), pairing=params.pairing))
