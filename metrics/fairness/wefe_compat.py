"""WEFE 1.0.1's API, computed through evaldag's graph and cache: change one import.

::

    # from wefe.query import Query
    # from wefe.word_embedding_model import WordEmbeddingModel
    # from wefe.metrics import WEAT, RNSB
    from evaldag.metrics.fairness.wefe_compat import Query, WordEmbeddingModel, WEAT, RNSB

    model = WordEmbeddingModel(keyed_vectors, "glove-wiki-gigaword-300")
    WEAT().run_query(query, model, return_effect_size=True, calculate_p_value=True)

Each ``run_query`` builds the query's nodes (template checked first: a query the
metric cannot take raises ``ValueError``, as in WEFE), runs them with
``evaldag.engine.run`` and returns WEFE's result dict. Underneath, every set lookup,
cosine matrix and s vector is a cached node, keyed by the vectors' content: a second
identical call computes nothing, and WEAT after WEAT-with-p-value on the same query
recomputes only the p-value. ``metric.last_run`` is that run's ``RunResult``.

What differs from WEFE 1.0.1 (docs/fairness.md has the full list):

* NaN results carry ``reason`` (WEFE only logs it), and WEAT's NaN result has
  ``p_value``; result dicts may hold extra keys after WEFE's (per-word
  contributions, the p-value method, RNSB's classifier accuracy);
* randomness is seedable: ``random_state`` also applies to WEAT's p-value and to RNSB
  with ``n_iterations > 1``. Without it WEAT's p-value draws a fresh seed per call,
  recorded in the result, and RNSB draws from numpy's global RNG in WEFE's order (so
  ``np.random.seed(s)`` before the call gives WEFE's numbers); neither is served from
  the cache; pass a seed to get cached, reproducible values;
* ``p_value_method`` also takes ``'exact'``, ``'monte_carlo'`` and ``'auto'``;
  ``'approximate'`` (the default, as in WEFE) is WEFE's sampler, draw for draw;
* RNSB's classifier is fixed: liblinear's logistic regression, replayed in numpy (no
  scikit-learn). ``estimator`` must be sklearn's ``LogisticRegression`` (or left out)
  and ``estimator_params`` may only restate WEFE's default;
* unknown keyword arguments are ignored as in WEFE, but with a warning that names them.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ...engine import run
from ...engine.results import NodeRecord, Result, RunResult
from .lookup import LookupOptions
from .query import Query
from .registry import MetricSettings, TemplateError, as_result, query_nodes, wefe_fields
from .ripa import RipaPairingError, RipaParams
from .rnd import RndParams
from .rnsb import RnsbIterationError, RnsbParams, rnsb
from .weat import WeatOptions
from .weat_p_value import MAX_EXACT_SPLITS, PValueParams, n_splits
from .wefe_compat_base import BaseMetric, PreprocessorArgs
from .wefe_compat_model import WordEmbeddingModel, as_model as _as_model, as_query as _as_query, get_embeddings_from_query
from .word_sets import lookup_from_value

__all__ = ["ECT", "MAC", "RIPA", "RND", "RNSB", "WEAT", "BaseMetric", "PreprocessorArgs", "Query", "WordEmbeddingModel",
           "get_embeddings_from_query"]

log = logging.getLogger(__name__)
GROUP = "WEFE"
QUERY_ID = "query"
_DEFAULT_PREPROCESSORS: list[dict[str, Any]] = [{}]  # never mutated (WEFE's default, read-only)


def _fresh_seed() -> int:
    return int(np.random.SeedSequence().generate_state(1)[0])


class NodeFailure(RuntimeError):
    """The traceback of the graph node that failed, chained under the re-raised error."""


_RERAISABLE: dict[str, type[Exception]] = {
    "RipaPairingError": RipaPairingError, "RnsbIterationError": RnsbIterationError,
    "TemplateError": TemplateError, "ValueError": ValueError, "TypeError": TypeError,
    "IndexError": IndexError, "KeyError": KeyError,
}


def _raise_failure(result: RunResult, name: str) -> None:
    """Re-raise a failed node's error with its own type, as WEFE would have raised it."""
    rec: NodeRecord = result.record(name)
    failed = result.failures()
    if rec.status == "failed" or failed:
        src = rec if rec.status == "failed" else failed[0]
        last = src.error.strip().splitlines()[-1] if src.error.strip() else src.reason
        type_name, _, message = last.partition(": ")
        cls = _RERAISABLE.get(type_name.rsplit(".", 1)[-1], RuntimeError)
        raise cls(message or last) from NodeFailure(f"node {src.name} failed:\n{src.error}")
    raise RuntimeError(f"{name}: {rec.status} ({rec.reason})")


class _WefeMetric:
    """What every facade metric shares: arguments -> nodes -> run -> WEFE's dict."""

    metric_template: ClassVar[tuple[int | str, int | str]]
    metric_name: ClassVar[str]
    metric_short_name: ClassVar[str]

    def __init__(self, cache_dir: str | None = None):
        self.cache_dir = cache_dir
        self.last_run: RunResult | None = None

    def __repr__(self) -> str:
        return f"<{self.metric_short_name}: {self.metric_name} (evaldag graph)>"

    def _run(
        self, query: Any, model: Any, settings: MetricSettings, *,
        lost_vocabulary_threshold: float, preprocessors: Sequence[Mapping[str, Any]],
        strategy: str, normalize: bool, warn_not_found_words: bool,
        cache_dir: str | None, ignored: Mapping[str, Any],
    ) -> dict[str, Any]:
        wsq, model = _as_query(query), _as_model(model)
        if not isinstance(warn_not_found_words, bool):
            raise TypeError(f"warn_not_found_words should be a bool, got: {type(warn_not_found_words)}.")
        if ignored:
            warnings.warn(f"{self.metric_short_name}.run_query ignores {sorted(ignored)} "
                          f"(WEFE 1.0.1 ignores unknown keyword arguments too)", stacklevel=3)
        lookup = LookupOptions(
            lost_vocabulary_threshold=lost_vocabulary_threshold,
            preprocessors=preprocessors, strategy=strategy, normalize=normalize,
            vocab_prefix=model.vocab_prefix,
        )
        nodes = query_nodes(QUERY_ID, wsq, [self.metric_short_name], lookup=lookup,
                            settings=settings, group=GROUP)
        result = run(nodes, {"embeddings": model.resource}, cache_dir=cache_dir or self.cache_dir)
        self.last_run = result
        name = f"{GROUP}/{QUERY_ID}/{self.metric_short_name}"
        if result.record(name).status not in ("computed", "cached"):
            _raise_failure(result, name)
        if warn_not_found_words:
            _warn_not_found(result.value(f"{GROUP}/{QUERY_ID}/lookup"), model.name)
        value = result.value(name)
        assert isinstance(value, Result)
        return wefe_fields(value)


def _warn_not_found(lookup: Mapping[str, Any], model_name: str) -> None:
    for s in list(lookup["targets"]) + list(lookup["attributes"]):
        if s["not_found"]:
            log.warning("The following words from set '%s' do not exist within the vocabulary of %s: %s",
                        s["name"], model_name, s["not_found"])


def _lookup_args(lost_vocabulary_threshold: Any, preprocessors: Any, strategy: Any,
                 normalize: Any, warn_not_found_words: Any) -> dict[str, Any]:
    return {"lost_vocabulary_threshold": lost_vocabulary_threshold, "preprocessors": preprocessors,
            "strategy": strategy, "normalize": normalize, "warn_not_found_words": warn_not_found_words}


class WEAT(_WefeMetric):
    metric_template = (2, 2)
    metric_name = "Word Embedding Association Test"
    metric_short_name = "WEAT"

    def run_query(
        self, query: Any, model: Any, return_effect_size: bool = False,
        calculate_p_value: bool = False, p_value_test_type: str = "right-sided",
        p_value_method: str = "approximate", p_value_iterations: int = 10000,
        p_value_verbose: bool = False, lost_vocabulary_threshold: float = 0.2,
        preprocessors: Sequence[Mapping[str, Any]] = _DEFAULT_PREPROCESSORS,
        strategy: str = "first", normalize: bool = False, warn_not_found_words: bool = False,
        *args: Any, random_state: int | None = None, max_exact_splits: int = MAX_EXACT_SPLITS,
        cache_dir: str | None = None, **kwargs: Any,
    ) -> dict[str, Any]:
        """WEFE's WEAT.run_query; ``random_state`` seeds the p-value (an evaldag addition)."""
        method = "wefe" if p_value_method == "approximate" else p_value_method
        if calculate_p_value and random_state is None:
            n1, n2 = (len(set(s)) for s in _as_query(query).target_sets)
            exact = method == "exact" or (method == "auto" and n_splits(n1, n2) <= max_exact_splits)
            random_state = None if exact else _fresh_seed()
        p_value = PValueParams(method=method, test_type=p_value_test_type, iterations=p_value_iterations,
                               random_state=random_state, max_exact_splits=max_exact_splits)
        settings = MetricSettings(weat=WeatOptions(
            return_effect_size=return_effect_size, calculate_p_value=calculate_p_value, p_value=p_value))
        if p_value_verbose:
            log.info("WEAT p-value: method %s, %s, seed %s", method, p_value_test_type, random_state)
        return self._run(query, model, settings, cache_dir=cache_dir, ignored=_ignored(args, kwargs),
                         **_lookup_args(lost_vocabulary_threshold, preprocessors, strategy, normalize, warn_not_found_words))


class RND(_WefeMetric):
    metric_template = (2, 1)
    metric_name = "Relative Norm Distance"
    metric_short_name = "RND"

    def run_query(
        self, query: Any, model: Any, distance: str = "norm", lost_vocabulary_threshold: float = 0.2,
        preprocessors: Sequence[Mapping[str, Any]] = _DEFAULT_PREPROCESSORS, strategy: str = "first",
        normalize: bool = False, warn_not_found_words: bool = False, *args: Any,
        cache_dir: str | None = None, **kwargs: Any,
    ) -> dict[str, Any]:
        """WEFE's RND.run_query (``distance``: 'norm' or 'cos', the cosine *similarity*)."""
        settings = MetricSettings(rnd=RndParams(distance=distance))
        return self._run(query, model, settings, cache_dir=cache_dir, ignored=_ignored(args, kwargs),
                         **_lookup_args(lost_vocabulary_threshold, preprocessors, strategy, normalize, warn_not_found_words))


class RNSB(_WefeMetric):
    metric_template = ("n", 2)
    metric_name = "Relative Negative Sentiment Bias"
    metric_short_name = "RNSB"

    def run_query(
        self, query: Any, model: Any, estimator: Any = None, estimator_params: Mapping[str, Any] | None = None,
        n_iterations: int = 1, random_state: int | None = None, holdout: bool = True,
        print_model_evaluation: bool = False, lost_vocabulary_threshold: float = 0.2,
        preprocessors: Sequence[Mapping[str, Any]] = _DEFAULT_PREPROCESSORS, strategy: str = "first",
        normalize: bool = False, warn_not_found_words: bool = False, *args: Any,
        solver: str = "liblinear", cache_dir: str | None = None, **kwargs: Any,
    ) -> dict[str, Any]:
        """WEFE's RNSB.run_query with liblinear's logistic regression replayed in numpy."""
        _check_estimator(estimator, estimator_params)
        settings = MetricSettings(rnsb=RnsbParams(
            random_state=0 if random_state is None else random_state,
            holdout=holdout, n_iterations=n_iterations, solver=solver))
        out = self._run(query, model, settings, cache_dir=cache_dir, ignored=_ignored(args, kwargs),
                        **_lookup_args(lost_vocabulary_threshold, preprocessors, strategy, normalize, warn_not_found_words))
        if random_state is None and not math.isnan(out["result"]):
            # unseeded, WEFE's split and liblinear's seed come from numpy's global RNG, in this
            # order (scikit-learn's random_state=None): draw from it the same way, so that
            # np.random.seed(s) before the call gives WEFE's numbers and later calls go on from there
            lookup = lookup_from_value(self.last_run.value(f"{GROUP}/{QUERY_ID}/lookup"))
            out = wefe_fields(as_result(rnsb(lookup, random_state=np.random.mtrand._rand, holdout=holdout,
                                             n_iterations=n_iterations, solver=solver)))
        if print_model_evaluation:
            log.info("RNSB classifier accuracy per iteration: %s", out.get("classifier_accuracy"))
        return out


def _check_estimator(estimator: Any, params: Mapping[str, Any] | None) -> None:
    if estimator is not None and getattr(estimator, "__name__", type(estimator).__name__) != "LogisticRegression":
        raise NotImplementedError(
            f"RNSB here always uses liblinear's logistic regression (replayed without scikit-learn); "
            f"estimator={estimator!r} is not supported")
    extra = {k: v for k, v in (params or {}).items()
             if not ((k, v) in (("solver", "liblinear"),) or k in ("max_iter", "random_state"))}
    if extra:
        raise NotImplementedError(
            f"RNSB estimator_params {extra} are not supported: the classifier is WEFE's default, "
            f"LogisticRegression(solver='liblinear', C=1); pass random_state to seed it")


class MAC(_WefeMetric):
    metric_template = ("n", "n")
    metric_name = "Mean Average Cosine Similarity"
    metric_short_name = "MAC"

    def run_query(
        self, query: Any, model: Any, lost_vocabulary_threshold: float = 0.2,
        preprocessors: Sequence[Mapping[str, Any]] = _DEFAULT_PREPROCESSORS, strategy: str = "first",
        normalize: bool = False, warn_not_found_words: bool = False, *args: Any,
        cache_dir: str | None = None, **kwargs: Any,
    ) -> dict[str, Any]:
        """WEFE's MAC.run_query (a mean cosine *distance*: lower is more associated)."""
        return self._run(query, model, MetricSettings(), cache_dir=cache_dir, ignored=_ignored(args, kwargs),
                         **_lookup_args(lost_vocabulary_threshold, preprocessors, strategy, normalize, warn_not_found_words))


class ECT(_WefeMetric):
    metric_template = (2, 1)
    metric_name = "Embedding Coherence Test"
    metric_short_name = "ECT"

    def run_query(
        self, query: Any, model: Any, lost_vocabulary_threshold: float = 0.2,
        preprocessors: Sequence[Mapping[str, Any]] = _DEFAULT_PREPROCESSORS, strategy: str = "first",
        normalize: bool = False, warn_not_found_words: bool = False, *args: Any,
        cache_dir: str | None = None, **kwargs: Any,
    ) -> dict[str, Any]:
        """WEFE's ECT.run_query."""
        return self._run(query, model, MetricSettings(), cache_dir=cache_dir, ignored=_ignored(args, kwargs),
                         **_lookup_args(lost_vocabulary_threshold, preprocessors, strategy, normalize, warn_not_found_words))


class RIPA(_WefeMetric):
    metric_template = (2, 1)
    metric_name = "Relational Inner Product Association"
    metric_short_name = "RIPA"

    def run_query(
        self, query: Any, model: Any, lost_vocabulary_threshold: float = 0.2,
        preprocessors: Sequence[Mapping[str, Any]] = _DEFAULT_PREPROCESSORS, strategy: str = "first",
        normalize: bool = False, warn_not_found_words: bool = False, *args: Any,
        pairing: str = "wefe", cache_dir: str | None = None, **kwargs: Any,
    ) -> dict[str, Any]:
        """WEFE's RIPA.run_query; ``pairing='query'`` pairs words by query position instead."""
        settings = MetricSettings(ripa=RipaParams(pairing=pairing))
        return self._run(query, model, settings, cache_dir=cache_dir, ignored=_ignored(args, kwargs),
                         **_lookup_args(lost_vocabulary_threshold, preprocessors, strategy, normalize, warn_not_found_words))


def _ignored(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    if args:
        out["*args"] = tuple(args)
    return out

