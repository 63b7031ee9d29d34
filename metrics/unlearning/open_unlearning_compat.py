"""open-unlearning's way of writing a metric, hosted: ``@unlearning_metric`` handlers as evaldag nodes.

An open-unlearning user writes a *handler* -- a function ``(model, **kwargs)`` decorated
``@unlearning_metric(name=...)`` that returns ``{"agg_value", ...}`` (``value_by_index``
for per-item metrics) -- and a Hydra YAML config that names its parents (``pre_compute``),
its reference logs and the handler (``open_unlearning_compat_config.py`` reads it). Such
a file ports by changing one import::

    from evaldag.metrics.unlearning.open_unlearning_compat import unlearning_metric

Here the decorator registers the handler by name in :data:`HANDLERS`; a config then
becomes one node (:func:`handler_node`). Why two kinds of node: a handler that only reads
``kwargs["pre_compute"]`` / ``kwargs["reference_logs"]`` is an *aggregator* (no model,
runs on its parents' values); one whose body touches ``model`` gets the loaded Hugging
Face model and runs as one opaque request (``open_unlearning_compat_hf.py``), cached like
any other, never batched with the rest, and only where an ``hf:`` model serves it.
Either way the handler's own source is part of the node's fingerprint, so editing the
handler recomputes it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping

from ...engine import Node, Params, Result
from ...engine.declare import metric
from .open_unlearning_compat_core import HANDLERS, Handler, calls_model, find_handler, logger, plain, unlearning_metric
from .open_unlearning_compat_hf import HandlerCall

__all__ = ["HANDLERS", "Handler", "calls_model", "find_handler", "handler_node", "logger", "unlearning_metric"]

# ----------------------------------------------------------------------------- values both ways

def ou_shape(value: Any) -> Any:
    """A parent's value as open-unlearning hands it to a handler (``{"agg_value", "value_by_index", ...}``)."""
    if isinstance(value, Result):
        return plain(value.to_dict())
    return plain(value)


def as_result(out: Any, name: str) -> Result:
    """The handler's return value as a Result, refused when it is not open-unlearning's shape.

    No bare NaN and no silent None: either gets a reason naming the handler's config.
    """
    if not isinstance(out, Mapping) or "agg_value" not in out:
        got = f"a dict with keys {sorted(map(str, out))}" if isinstance(out, Mapping) else f"a {type(out).__name__}"
        raise ValueError(f"{name}: the handler returned {got}; expected {{'agg_value': ..., 'value_by_index'?: ...}}")
    res = Result.from_dict(plain(dict(out)))
    agg = res.agg_value
    if res.reason is None and agg is None:
        res.reason = f"{name}: the handler returned agg_value None (a missing pre_compute or reference log?)"
    elif res.reason is None and isinstance(agg, float) and math.isnan(agg):
        res.reason = f"{name}: the handler returned NaN"
    return res


# ----------------------------------------------------------------------------- the node

class HandlerParams(Params):
    """What identifies the work: the handler, its code, and the config's arguments and references."""

    handler: str
    handler_code: str
    arguments: str  # canonical JSON of the handler's keyword arguments (batch_size, aggregator, ...)
    reference_logs: str  # canonical JSON: log name -> [[key in the logs, access key], ...]


def canonical(x: Any) -> str:
    return json.dumps(plain(x), sort_keys=True, separators=(",", ":"), default=str)


class LogKeys(Params):
    include: tuple[tuple[str, str], ...]  # (key in the logs, access key)


@metric("ou_reference_logs", version="1", params=LogKeys, needs=("logs",), register=False)
def reference_logs_node(logs: dict, params: LogKeys) -> dict:
    """The included entries of one reference-logs file, by access key (None where absent, as there)."""
    return {access: plain(logs.get(key)) for key, access in params.include}


@metric("ou_rows", version="1", needs=("data",), register=False)
def rows_node(data: Any) -> list:
    """The split's rows, each with its row position as ``index`` (open-unlearning's ``add_dataset_index``)."""
    return [{**plain(dict(row)), "index": i} for i, row in enumerate(data)]


#: the parent keys this layer adds beside the config's access keys
REF_PREFIX, ROWS = "ou_reference_logs.", "ou_rows"


def _kwargs(params: HandlerParams, inputs: Mapping[str, Any], parents: tuple[str, ...]) -> dict:
    """The kwargs open-unlearning builds: the arguments, ``pre_compute`` by access key, ``reference_logs``."""
    kw = json.loads(params.arguments)
    pre = {k: ou_shape(inputs[k]) for k in parents if k in inputs}
    if pre:
        kw["pre_compute"] = pre
    refs = {k[len(REF_PREFIX):]: v for k, v in inputs.items() if k.startswith(REF_PREFIX)}
    if refs:  # a log whose path was null (no --retain-logs) is skipped, as open-unlearning does
        kw["reference_logs"] = refs
    return kw


def handler_node(name: str, group: str, handler: Handler, arguments: Mapping[str, Any],
                 parents: Mapping[str, Node], reference_logs: Mapping[str, tuple[str | None, list[tuple[str, str]]]],
                 data: str | None = None) -> Node:
    """One config as one named node of ``group`` (its results land in ``<GROUP>_EVAL.json`` under ``name``).

    ``parents``: access key -> parent node; ``reference_logs``: log name -> (run resource
    holding the logs, [(key in the logs, access key)]), the resource None when its path
    was ``${...retain_logs_path}`` and no retain logs were given; ``data``: the split
    resource a model-calling handler reads as ``kwargs["data"]``. The logs and the rows
    come in as parent nodes (not as bindings of this node, which would rebind its parents too).
    """
    keys = tuple(parents)
    ups = dict(parents)
    for log, (res, pairs) in reference_logs.items():
        if res is not None:
            ups[REF_PREFIX + log] = reference_logs_node(include=tuple(map(tuple, pairs)), bind={"logs": res})
    params = dict(handler=handler.name, handler_code=handler.code, arguments=canonical(arguments),
                  reference_logs=canonical({log: pairs for log, (_, pairs) in reference_logs.items()}))
    if data is not None:
        ups[ROWS] = rows_node(bind={"data": data})
    if handler.calls_model:
        mdef = metric(name, version="1", params=HandlerParams, needs=("model",), register=False,
                      requests={"model": {"ou_handler_call": ()}})(model_call(name, keys))
    else:
        def aggregate(params: HandlerParams, **inputs: Any) -> Result:
            """An aggregator handler: called with ``model=None`` on its parents' values and the reference logs."""
            h = find_handler(params.handler)
            if h is None or h.code != params.handler_code:
                raise ValueError(f"{name}: handler {params.handler!r} is no longer the one this node was built with")
            kw = _kwargs(params, inputs, keys)
            if ROWS in inputs:  # a config that names a dataset: its rows, also without a model
                kw["data"] = inputs[ROWS]
            return as_result(h.fn(None, handler=params.handler, **kw), name)

        mdef = metric(name, version="1", params=HandlerParams, register=False)(aggregate)
    return mdef(name=name, group=group, parents=ups, **params)


def model_call(name: str, parents: tuple[str, ...]) -> Callable[..., Any]:
    """The scorer of a model-calling handler: one opaque request, its answer as a Result."""

    def call_handler(params: HandlerParams, model: Any = None, **inputs: Any):
        """A model-calling open-unlearning handler: one opaque request on an hf: model (not batched)."""
        kw = _kwargs(params, inputs, parents)
        rows = inputs.get(ROWS)
        body = {"kwargs": kw, **({"data": rows} if rows is not None else {})}
        # not key-sorted: the handler sees value_by_index in its parent's row order, as there
        payload = json.dumps(plain(body), separators=(",", ":"), default=str)
        (answer,) = yield [HandlerCall(params.handler, params.handler_code, payload)]
        return as_result(json.loads(answer.text), name)

    return call_handler
