"""Providers of the model pair: ``weight_deltas`` and ``manipulated_layers``.

Both are derived lazily, once per run, and only when some node needs them. The file
reading lives in :class:`evaldag.engine.adapters.hf.hf_weights.WeightDeltas`; a metric
only asks it for a tensor. Bind ``manipulated_layers`` yourself (a list of ints, e.g.
from an edit spec) and the provider is not used.
"""

from __future__ import annotations

from typing import Any

from ...engine import provider
from ...engine.adapters.hf.hf_weights import WeightDeltas


@provider("weight_deltas", version="1", needs=("base_model", "model"))
def weight_deltas(base_model: Any, model: Any) -> WeightDeltas:
    """``original - edited`` per named parameter (lm-debugger's sign), streamed on first use."""
    return WeightDeltas(base_model, model)


@provider("manipulated_layers", version="1", needs=("weight_deltas",))
def manipulated_layers(weight_deltas: WeightDeltas) -> list[int]:
    """The layers with a non-zero delta in any of their parameters, ascending."""
    return weight_deltas.nonzero_layers()
