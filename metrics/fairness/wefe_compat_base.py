"""WEFE's ``BaseMetric``: a user's WEFE metric runs on evaldag by changing its imports.

::

    # from wefe.metrics.base_metric import BaseMetric            (the seed, WEFE 0.x)
    # from wefe.preprocessing import get_embeddings_from_query   (WEFE 1.0.1)
    from evaldag.metrics.fairness.wefe_compat import BaseMetric, Query, WordEmbeddingModel, get_embeddings_from_query

A subclass declares ``metric_template``, ``metric_name`` and ``metric_short_name`` and
implements ``run_query(query, model, ...)``. Both of WEFE's ways of checking arguments
work: the seed's ``super().run_query(query, word_embedding, lost_vocabulary_threshold,
preprocessor_args, secondary_preprocessor_args, warn_not_found_words, ...)`` and 1.0.1's
``self._check_input(query, model[, lost_vocabulary_threshold, warn_not_found_words])``;
both raise WEFE's errors (``TypeError`` for a wrong argument type, ``ValueError`` naming
the query and the cardinalities when the query does not fit the template).

Why the subclass's ``run_query`` is wrapped: so that a user's metric is a graph node like
every evaldag metric. Calling it checks the template first (before anything is read),
then runs one node, ``WEFE/query/<metric_short_name>``, that needs the ``embeddings``
resource and takes the query and the call's other arguments as params; its code
identity is the class's source and its params include the instance's own attributes (what
its ``__init__`` set). A second identical call is served from the cache; an edited class,
other vectors, other arguments or another configuration recompute. The node calls the original
``run_query`` (on a model made of the same vectors), so the metric computes exactly what
it computes under WEFE. A NaN ``result`` is stored with its reason (the lookup's, when a
set lost too many words). ``metric.last_run`` is that run's ``RunResult``. Arguments or
attributes that cannot be params (a callable preprocessor, an array) make the call run directly,
uncached, as in WEFE: the value is the same, only the caching is lost.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from ...engine import Params, Result, metric, run
from ...engine.results import RunResult
from .query import Query
from .wefe_compat_model import LOST_REASONS, WordEmbeddingModel

__all__ = ["BaseMetric", "PreprocessorArgs"]

#: the seed's type of a preprocessor dict (``wefe.word_embedding_model.PreprocessorArgs``)
PreprocessorArgs = dict

GROUP = "WEFE"
QUERY_ID = "query"
_IN_NODE: contextvars.ContextVar[bool] = contextvars.ContextVar("wefe_in_node", default=False)


class UserCall(Params):
    """One call of a user's ``run_query``, as JSON: the query, the model's name, the other arguments."""

    query: dict[str, Any]
    model_name: str
    vocab_prefix: str | None = None
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    state: dict[str, Any] = {}  # the instance's own attributes (a metric configured in its __init__)


class BaseMetric:
    """WEFE's base class (see the module docstring). ``cache_dir``: where the node cache lives."""

    metric_template: ClassVar[tuple[int | str, int | str]]
    metric_name: ClassVar[str]
    metric_short_name: ClassVar[str]

    def __init__(self, cache_dir: str | None = None):
        self.cache_dir = cache_dir
        self.last_run: RunResult | None = None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        own = cls.__dict__.get("run_query")
        if own is not None and not getattr(own, "_evaldag_wrapped", False):
            cls.run_query = _through_graph(own)  # type: ignore[method-assign]

    def _check_input(self, query: Any, model: Any, lost_vocabulary_threshold: Any = 0.2,
                     warn_not_found_words: Any = False, *_: Any) -> None:
        """WEFE 1.0.1's checks (its docs call it with two arguments, its code with four; WEFE
        0.4 passed ``locals()`` third, which is accepted and not read)."""
        if not isinstance(query, Query):
            raise TypeError(f"query should be a Query instance, got: {type(query)}.")
        if not isinstance(model, WordEmbeddingModel):
            raise TypeError(f"model should be a WordEmbeddingModel instance, got: {type(model)}.")
        if not isinstance(lost_vocabulary_threshold, Mapping):  # not 0.4's locals()
            if not isinstance(lost_vocabulary_threshold, float):
                raise TypeError(f"lost_vocabulary_threshold should be a float, got: {type(lost_vocabulary_threshold)}.")
            if not isinstance(warn_not_found_words, bool):
                raise TypeError(f"warn_not_found_words should be a bool, got: {type(warn_not_found_words)}.")
        check_template(self, query)

    def run_query(self, query: Any, word_embedding: Any, lost_vocabulary_threshold: float = 0.2,
                  preprocessor_args: Any = None, secondary_preprocessor_args: Any = None,
                  warn_not_found_words: bool = False, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The seed's ``super().run_query(...)``: the argument and template checks; returns ``{}``."""
        self._check_input(query, word_embedding, lost_vocabulary_threshold, warn_not_found_words)
        if not isinstance(preprocessor_args, (Mapping, type(None))):
            raise TypeError(f"preprocessor_args should be a dict of preprocessor arguments, got {preprocessor_args}.")
        if not isinstance(secondary_preprocessor_args, (Mapping, type(None))):
            raise TypeError("secondary_preprocessor_args should be a dict of preprocessor arguments or None, "
                            f"got {secondary_preprocessor_args}.")
        return {}

    def __repr__(self) -> str:
        return f"<{getattr(self, 'metric_short_name', type(self).__name__)}: {getattr(self, 'metric_name', '')} (evaldag graph)>"

    # -- the node
    def _evaldag_node(self, embeddings: Any, params: UserCall) -> Result:
        """The node's function: the original run_query on these vectors; a bound method, so that its
        code identity is the user's class source (fingerprint.code_identity)."""
        model = WordEmbeddingModel(embeddings, params.model_name, params.vocab_prefix)
        reasons: list[str] = []
        token, lost = _IN_NODE.set(True), LOST_REASONS.set(reasons)
        try:
            out = type(self).run_query(self, Query.model_validate(params.query), model, *params.args, **params.kwargs)
        finally:
            _IN_NODE.reset(token)
            LOST_REASONS.reset(lost)
        return _as_result(self, out, reasons)


def check_template(metric: Any, query: Query) -> None:
    """WEFE's template check: ``ValueError`` naming the query and both cardinalities."""
    template = getattr(metric, "metric_template", None)
    if not (isinstance(template, tuple) and len(template) == 2):
        raise TypeError(f"{type(metric).__name__}.metric_template should be a (targets, attributes) tuple, got {template!r}.")
    short = getattr(metric, "metric_short_name", type(metric).__name__)
    for i, kind in enumerate(("target", "attribute")):
        if template[i] != "n" and query.template[i] != template[i]:
            raise ValueError(
                f"The cardinality of the {kind} sets of the '{query.query_name}' query ({query.template[i]}) "
                f"does not match the cardinality required by {short} ({template[i]}).")


def _plain(value: Any) -> Any:
    """numpy scalars and arrays -> Python numbers and lists (what the node store keeps)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _as_result(m: BaseMetric, out: Any, reasons: list[str]) -> Result:
    if not isinstance(out, Mapping) or "result" not in out:
        raise TypeError(f"{type(m).__name__}.run_query must return a dict with 'query_name' and 'result' "
                        f"(WEFE's contract), got {type(out).__name__}")
    fields = _plain(dict(out))
    agg = fields.pop("result")
    reason = None
    if agg is None or (isinstance(agg, float) and math.isnan(agg)):
        reason = "; ".join(reasons) or f"{type(m).__name__}.run_query returned NaN"
    return Result(agg, extra=fields, reason=reason)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


_BUILTIN: dict[str, type[Exception]] = {e.__name__: e for e in (
    TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, AttributeError, NotImplementedError)}


def _reraise(cls_name: str, error: str) -> None:
    """The user's exception again, with its type, as WEFE would have let it through (the node's
    traceback is in ``last_run``)."""
    last = error.strip().splitlines()[-1] if error.strip() else error
    type_name, _, message = last.partition(": ")
    raise _BUILTIN.get(type_name.rsplit(".", 1)[-1], RuntimeError)(
        message if type_name.rsplit(".", 1)[-1] in _BUILTIN else f"{cls_name}.run_query failed in its node: {last}")


def _through_graph(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    sig = inspect.signature(fn)
    first = [p.name for p in sig.parameters.values()][1:3]  # WEFE's (query, model), whatever their names

    @functools.wraps(fn)
    def run_query(self: BaseMetric, *args: Any, **kwargs: Any) -> dict[str, Any]:
        cache_dir = kwargs.pop("cache_dir", None) or getattr(self, "cache_dir", None)
        try:
            given = sig.bind(self, *args, **kwargs).arguments
        except TypeError:
            given = {}
        query, model = (given.get(n) for n in first) if len(first) == 2 else (None, None)
        if _IN_NODE.get() or not isinstance(query, Query) or not isinstance(model, WordEmbeddingModel):
            return fn(self, *args, **kwargs)  # inside the node, or WEFE's own errors to come
        check_template(self, query)  # before anything is read
        rest = {k: v for k, v in kwargs.items() if k not in first}
        state = {k: v for k, v in vars(self).items() if k not in ("cache_dir", "last_run")}
        call = {"query": query.model_dump(mode="json"), "model_name": model.name,
                "vocab_prefix": model.vocab_prefix, "args": list(args[2:]), "kwargs": rest, "state": state}
        if not _jsonable(call):  # a callable preprocessor, an array, an object in the instance: run as WEFE does, uncached
            return fn(self, *args, **kwargs)
        declared = metric(f"wefe_user.{type(self).__name__}", version="1", params=UserCall,
                          needs=("embeddings",), register=False)(self._evaldag_node)
        short = getattr(self, "metric_short_name", type(self).__name__)
        node = declared(**call).named(f"{QUERY_ID}/{short}", GROUP)
        result = run([node], {"embeddings": model.resource}, cache_dir=cache_dir)
        self.last_run = result
        rec = result.record(f"{GROUP}/{QUERY_ID}/{short}")
        if rec.status not in ("computed", "cached"):
            _reraise(type(self).__name__, rec.error or rec.reason or rec.status)
        value = result.value(rec.name)
        out = {**value.extra, "result": value.agg_value}
        out = {"query_name": out.pop("query_name", query.query_name), "result": out.pop("result"), **out}
        if value.reason:
            out["reason"] = value.reason
        return out

    run_query._evaldag_wrapped = True  # type: ignore[attr-defined]
    return run_query
