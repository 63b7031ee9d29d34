"""``weight_delta_norm``: the norm of each manipulated layer's MLP down-projection delta.

lm-debugger's NormOfWeightUpdate: for each manipulated layer L,
``torch.linalg.matrix_norm(delta[mlp_down_proj.format(L) + ".weight"])``. Its docstring
says "2-norm" but the default ``ord`` is Frobenius, which is the default here too;
``ord="spectral"`` gives the largest singular value (``ord=2``). The result keys each
layer index (a string) to its norm; ``agg_value`` is the largest of them.
"""

from __future__ import annotations

from typing import Any, Literal

from ...engine import Params, Result, metric


class NormParams(Params):
    ord: Literal["fro", "spectral"] = "fro"
    layers: tuple[int, ...] | None = None  # None: the manipulated layers


@metric("weight_delta_norm", version="1", params=NormParams, needs=("weight_deltas", "manipulated_layers"))
def weight_delta_norm(weight_deltas: Any, manipulated_layers: list[int], params: NormParams) -> Result:
    """Frobenius (or spectral) norm of the MLP down-projection delta, per manipulated layer."""
    import torch  # only when the node runs: a warm rerun reads its value from the cache

    layers = list(params.layers) if params.layers is not None else list(manipulated_layers)
    for layer in layers:
        weight_deltas.check_layer(layer)
    if not layers:
        return Result(agg_value=0.0, value_by_index={}, extra={"ord": params.ord, "layers": [], "note": "no manipulated layers"})
    ord_ = "fro" if params.ord == "fro" else 2
    norms = {str(layer): float(torch.linalg.matrix_norm(weight_deltas.down_proj(layer), ord=ord_))
             for layer in sorted(layers)}
    return Result(agg_value=max(norms.values()), value_by_index=norms, extra={"ord": params.ord, "layers": sorted(layers)})
