"""Where lm-debugger's attributes come from here, and the controller's config.

lm-debugger computes each attribute with a zero-argument getter on its live controller
(``MetricParameters.parameters_retrieval_functions``). Here each is a function of run
resources, so a metric that asks for one reads (and is fingerprinted by) exactly those:

* ``WEIGHT_DELTAS`` <- the ``weight_deltas`` and ``manipulated_layers`` providers: a lazy
  mapping parameter name -> original − edited tensor over every parameter of the
  manipulated layers (lm-debugger's ``get_weight_deltas(layers=get_manipulated_layers())``;
  a tensor is read from the two checkpoints when first looked up);
* ``MANIPULATED_LAYERS`` <- ``manipulated_layers`` (the layers with a non-zero delta);
* ``INTERVENTIONS`` <- ``edits``: the edit requests, one dict per edit.

``controller_config`` is lm-debugger's jsonnet config as far as metrics read it:
``num_layers``, ``layer_mappings`` (module-name templates, ``{}`` = layer) and ``model_name``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...engine.adapters.layer_names import layer_names, num_layers, read_config

__all__ = ["AttributeSource", "DeltaMapping", "controller_config", "getters_for", "plain"]


@dataclass(frozen=True)
class AttributeSource:
    """An attribute: the keyword it arrives under, the resources it reads, how it is made of them."""

    name: str
    needs: tuple[str, ...]
    get: Callable[..., Any]


class DeltaMapping(Mapping):
    """Parameter name -> original − edited tensor, for the parameters of ``layers`` only, read lazily."""

    def __init__(self, deltas: Any, layers: list[int]):
        self._deltas = deltas
        self._names = [n for layer in layers for n in deltas.layer_params(layer)]

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return self._deltas.delta(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


BUILT_IN: dict[str, AttributeSource] = {
    "WEIGHT_DELTAS": AttributeSource("WEIGHT_DELTAS", ("weight_deltas", "manipulated_layers"),
                                     lambda weight_deltas, manipulated_layers: DeltaMapping(weight_deltas, manipulated_layers)),
    "MANIPULATED_LAYERS": AttributeSource("MANIPULATED_LAYERS", ("manipulated_layers",),
                                          lambda manipulated_layers: list(manipulated_layers)),
    "INTERVENTIONS": AttributeSource("INTERVENTIONS", ("edits",), lambda edits: [dict(r) for r in edits]),
}


def getters_for(names: list[str], extra: Mapping[str, AttributeSource]) -> list[AttributeSource]:
    return [BUILT_IN[n] if n in BUILT_IN else extra[n] for n in names]


def controller_config(model: Any) -> SimpleNamespace:
    """``num_layers``, ``layer_mappings``, ``model_name`` of a checkpoint folder (its config.json)."""
    path = getattr(model, "path", None)
    if path is None or not getattr(model, "is_dir", False):
        raise ValueError(f"controller.config needs a local checkpoint folder; {getattr(model, 'name', model)!r} is not one")
    cfg = read_config(path)
    names = layer_names(str(cfg.get("model_type")))
    mappings = {"token_embedding": names.embed, "decoder_layer": names.layer, "mlp_sublayer": names.mlp,
                "attn_sublayer": names.attn, "mlp_down_proj": names.mlp_down_proj}
    return SimpleNamespace(num_layers=num_layers(cfg), layer_mappings=mappings, model_name=str(path),
                           vocab_size=cfg.get("vocab_size"))


def plain(value: Any) -> Any:
    """Tensors, numpy values and tuples -> numbers and lists (what the node store keeps)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
