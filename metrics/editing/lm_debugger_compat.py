"""lm-debugger's ``MetricItem``: a metric written for lm-debugger runs on evaldag by changing its imports.

::

    # from ..metric_item import MetricItem, Attributes      (lm-debugger's flask_server)
    from evaldag.metrics.editing.lm_debugger_compat import MetricItem, Attributes

    class NormOfWeightUpdate(MetricItem):
        def __init__(self, controller):
            super().__init__(controller)
            self.parameters.need_parameter(Attributes.WEIGHT_DELTAS)
            self.parameters.need_parameter(Attributes.MANIPULATED_LAYERS)

        def get_text_outputs(self, prompt, token_logits, pre_hook_rv=None, MANIPULATED_LAYERS=None, WEIGHT_DELTAS=None):
            ...

    evaldag run editing --model EDITED --base-model ORIGINAL --add-metric ./my_metric.py:NormOfWeightUpdate

Why a subclass becomes a graph node, not a hook: lm-debugger calls its metrics from an
interactive controller, one prompt at a time, with the model edited in place between the
hook and the output. Here the two model states are two checkpoints (``base_model``,
``model``), so the subclass is declared, when it is defined, as the metric
``<ClassName>`` (group EDITING): a scorer that runs once per edit prompt and returns a
Result whose ``value_by_index`` maps the edit's index to the dict ``get_text_outputs``
returned. Its code identity is the class's source; its inputs are resources:

* ``token_logits``: the edited model's ``seq_len x vocab`` logits on the prompt, a torch
  tensor, from the ``token_logits`` request kind (``logits_request.py``): batched by the
  executor, refused by the planner on a backend that cannot give full logits, and not
  kept in the request cache above its size cap;
* ``WEIGHT_DELTAS``: parameter name -> original − edited tensor for every parameter of
  the manipulated layers (lm-debugger's ``get_weight_deltas``), read lazily through the
  ``weight_deltas`` provider; ``MANIPULATED_LAYERS``: the ``manipulated_layers``
  provider (layers with a non-zero delta); ``INTERVENTIONS``: the edit requests (rows);
* ``pre_hook_rv``: what ``pre_intervention_hook(prompt, **attributes)`` returned for this
  prompt; the hook runs as its own node, ``<ClassName>.pre_intervention_hook``, on
  ``base_model`` (the unedited model): there ``WEIGHT_DELTAS`` is ``{}`` (nothing is
  edited yet, as in lm-debugger), and a hook that takes a ``token_logits`` argument gets
  the unedited model's logits on the prompt (an evaldag addition).

``self.controller.config`` has ``num_layers``, ``layer_mappings`` (``mlp_down_proj`` ...,
module-name templates with ``{}`` for the layer) and ``model_name``, read from the
checkpoint's config.json; ``self.config`` is the class's entry of ``metric_configs``
(``NormOfWeightUpdate.metric(config={...})``; ``{}`` when none). The live model is not
offered: a metric that needs more forward passes than the prompt's logits is an evaldag
metric (docs/writing-a-metric.md). Output values are stored as given (no rounding to
3 decimals, no NaN turned into 0, unlike lm-debugger's frontend); ``agg_value`` is the
mean over prompts when every dict holds one number, else NaN with that reason.

A new attribute, as the seed describes (an enum entry plus a getter):
``MY_ATTR = add_attribute("MY_ATTR", needs=("texts",), get=lambda texts: texts)``, then
``self.parameters.need_parameter(MY_ATTR)``; the value arrives as ``MY_ATTR=...``.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from ...engine import Params, Result
from ...engine.declare import REGISTRY, DeclarationError, MetricDef, check_inputs
from ...engine.fingerprint import code_identity
from .lm_debugger_attrs import AttributeSource, controller_config, getters_for, plain
from .logits_backend import TokenLogits  # registers the kind and its HF handler
from .prompts import check_edit, encode

__all__ = ["Attributes", "MetricItem", "MetricParameters", "add_attribute"]

GROUP = "EDITING"
CHUNK = 16  # prompts per yield: a 128k vocabulary makes megabytes of logits per prompt


class Attributes(Enum):
    """lm-debugger's attributes a metric may ask for (``need_parameter``)."""

    WEIGHT_DELTAS = auto()
    INTERVENTIONS = auto()
    MANIPULATED_LAYERS = auto()


@dataclass(frozen=True)
class Attribute:
    """An attribute added with :func:`add_attribute` (an Enum cannot gain members)."""

    name: str


_EXTRA: dict[str, AttributeSource] = {}


def add_attribute(name: str, *, needs: tuple[str, ...], get: Callable[..., Any]) -> Attribute:
    """A new attribute: ``get(**resources)`` of the resources ``needs`` names; it arrives as ``name=``."""
    if not name.isidentifier() or name in Attributes.__members__:
        raise ValueError(f"attribute name {name!r} must be an identifier and not one of {list(Attributes.__members__)}")
    _EXTRA[name] = AttributeSource(name, tuple(needs), get)
    return Attribute(name)


class MetricParameters:
    """lm-debugger's collector of the attributes a metric asked for, in the order asked."""

    def __init__(self, metric: Any):
        self.metric = metric
        self.returned_parameters: list[str] = []

    def need_parameter(self, attribute: Attributes | Attribute | str) -> None:
        name = attribute if isinstance(attribute, str) else attribute.name
        if name not in Attributes.__members__ and name not in _EXTRA:
            raise KeyError(f"no attribute {name!r}: known {list(Attributes.__members__) + sorted(_EXTRA)}")
        if name not in self.returned_parameters:
            self.returned_parameters.append(name)


class _Config(dict):
    """A metric's config: a dict read as attributes too (lm-debugger's pyhocon ConfigTree)."""

    def __getattr__(self, key: str) -> Any:
        try:
            value = self[key]
        except KeyError:
            raise AttributeError(key) from None
        return _Config(value) if isinstance(value, Mapping) else value


@dataclass
class Controller:
    """What ``self.controller`` offers: ``config`` (lazy: read on first use), ``interventions``."""

    read_config: Callable[[], Any] = lambda: None
    interventions: list[dict] = field(default_factory=list)

    @functools.cached_property
    def config(self) -> Any:
        return self.read_config()


class ItemParams(Params):
    config: dict[str, Any] = {}


class MetricItem:
    """Base of a user's lm-debugger metric; see the module docstring."""

    metric: MetricDef  # the declared evaldag metric, set when the subclass is defined

    def __init__(self, controller: Any):
        self.controller = controller
        self.parameters = MetricParameters(self)
        self.config = _Config(getattr(controller, "metric_config", {}) or {})

    def get_text_outputs(self, prompt: str, token_logits: Any, pre_hook_rv: Any = None, **kwargs: Any) -> dict:
        raise NotImplementedError

    def pre_intervention_hook(self, prompt: str, **kwargs: Any) -> Any:
        return None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.metric = declare(cls)


# -- declaring a subclass as a metric -------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ItemDef(MetricDef):
    """A MetricItem's declaration: its code identity is the class's source (with this layer's)."""

    item: type | None = None
    default_group: str = GROUP  # added.py puts an added node in this group

    @functools.cached_property
    def code(self) -> str:
        return f"{code_identity(self.item)}+{code_identity(self.fn)}"


def _asked(cls: type) -> list[str]:
    """The attributes the class's ``__init__`` asks for (it runs once, on a controller without a model)."""
    probe = cls.__new__(cls)
    MetricItem.__init__(probe, Controller(lambda: _no_model(cls)))
    try:
        cls.__init__(probe, probe.controller)
    except (KeyError, DeclarationError):  # an unknown attribute (lm-debugger's KeyError); config read too early
        raise
    except Exception as e:
        raise DeclarationError(f"{cls.__name__}.__init__ failed when declaring it: {type(e).__name__}: {e}") from None
    return list(probe.parameters.returned_parameters)


def _no_model(cls: type) -> Any:
    raise DeclarationError(f"{cls.__name__}.__init__ reads controller.config, which is known only when the metric "
                           "runs: read it in get_text_outputs")


def _takes(fn: Callable[..., Any], name: str) -> bool:
    ps = inspect.signature(fn).parameters.values()
    return any(p.name == name or p.kind == p.VAR_KEYWORD for p in ps)


def declare(cls: type) -> ItemDef:
    """Declare (and register) ``cls`` as the metric ``cls.__name__`` and, if it has one, its hook node."""
    asked = _asked(cls)
    getters = getters_for(asked, _EXTRA)
    needs = sorted({"model", "edits", *(n for g in getters for n in g.needs)})
    hook = _hook_def(cls, asked) if cls.pre_intervention_hook is not MetricItem.pre_intervention_hook else None

    def run_item(params: ItemParams, **inputs: Any) -> Iterator[list]:
        model, edits = inputs["model"], inputs["edits"]
        logits = yield from _logits(model, edits, "model")
        item = _instance(cls, inputs, "model", params)
        attrs = {g.name: g.get(**{n: inputs[n] for n in g.needs}) for g in getters}
        pre = inputs.get("pre_hook_rv")
        outs = {}
        for i, row in enumerate(edits):
            out = item.get_text_outputs(row["prompt"], logits[i], pre_hook_rv=None if pre is None else pre[i], **attrs)
            if not isinstance(out, Mapping):
                raise TypeError(f"{cls.__name__}.get_text_outputs must return a dict (edit {i}), got {type(out).__name__}")
            outs[str(i)] = plain(out)
        return _result(cls.__name__, outs, edits)

    run_item.__module__, run_item.__qualname__ = cls.__module__, f"{cls.__qualname__}.get_text_outputs"
    check_inputs(run_item, needs + (["pre_hook_rv"] if hook else []), f"MetricItem {cls.__name__}")
    # the hook node is the parent, configured with the metric's own params (its metric_configs entry)
    with_config = (lambda p: {"pre_hook_rv": hook(**p.model_dump())}) if hook else None
    m = ItemDef(name=cls.__name__, version=str(getattr(cls, "version", "1")), params=ItemParams, parents=with_config,
                needs=tuple(needs), fn=run_item, scorer=True, doc=(cls.__doc__ or "").strip(),
                requests={"model": {"token_logits": ()}}, item=cls)
    old = REGISTRY.metrics.get(m.name)
    if isinstance(old, ItemDef):  # the same class defined again (an edited file, a second import)
        REGISTRY.metrics.pop(m.name)
    return REGISTRY.add(m)


def _hook_def(cls: type, asked: list[str]) -> ItemDef:
    """``pre_intervention_hook`` as a node on ``base_model`` (the unedited model)."""
    getters = [g for g in getters_for(asked, _EXTRA) if g.name != "WEIGHT_DELTAS"]
    with_logits = _takes(cls.pre_intervention_hook, "token_logits")
    needs = sorted({"base_model", "edits", *(n for g in getters for n in g.needs)})

    def hook_body(params: ItemParams, **inputs: Any) -> Iterator[list]:
        edits = inputs["edits"]
        logits = (yield from _logits(inputs["base_model"], edits, "base_model")) if with_logits else None
        item = _instance(cls, inputs, "base_model", params)
        attrs = {g.name: g.get(**{n: inputs[n] for n in g.needs}) for g in getters}
        if "WEIGHT_DELTAS" in asked:
            attrs["WEIGHT_DELTAS"] = {}  # nothing is edited yet (lm-debugger: zeros)
        extra = (lambda i: {"token_logits": logits[i]}) if with_logits else (lambda i: {})
        return [plain(item.pre_intervention_hook(row["prompt"], **attrs, **extra(i))) for i, row in enumerate(edits)]

    hook_body.__module__, hook_body.__qualname__ = cls.__module__, f"{cls.__qualname__}.pre_intervention_hook"
    return ItemDef(name=f"{cls.__name__}.pre_intervention_hook", version=str(getattr(cls, "version", "1")),
                   params=ItemParams, parents=None, needs=tuple(needs), fn=hook_body, scorer=True, doc="",
                   requests={"base_model": {"token_logits": ()}} if with_logits else {}, item=cls)


def _logits(model: Any, edits: list[dict], resource: str) -> Iterator[Any]:
    """Each edit prompt's logits (torch tensors), asked for ``CHUNK`` prompts at a time."""
    import torch

    enc = model.encoder()
    ids = []
    for i, row in enumerate(edits):
        check_edit(row, i)
        ids.append(encode(enc, row["prompt"]))
    out: list[Any] = []
    for a in range(0, len(ids), CHUNK):
        got = yield [(resource, TokenLogits(x)) for x in ids[a: a + CHUNK]]
        out += [torch.from_numpy(g.logits) for g in got]
    return out


def _instance(cls: type, inputs: Mapping[str, Any], resource: str, params: ItemParams) -> Any:
    ctl = Controller(lambda: controller_config(inputs[resource]), [dict(r) for r in inputs["edits"]])
    ctl.metric_config = params.config  # type: ignore[attr-defined]
    return cls(ctl)


def _result(name: str, outs: dict[str, dict], edits: list[dict]) -> Result:
    extra = {"prompts": [row["prompt"] for row in edits]}
    if not outs:
        return Result.nan("no edits", **extra)
    single = [next(iter(d.values())) for d in outs.values() if len(d) == 1]
    if len(single) == len(outs) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in single):
        return Result(float(sum(single) / len(single)), outs, extra)
    return Result(math.nan, outs, extra, reason=f"{name} returns several values per prompt: see value_by_index "
                                                "(agg_value is the mean only when each prompt gives one number)")
