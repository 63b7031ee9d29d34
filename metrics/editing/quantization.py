"""``nf4_changed_fraction``: how much of an unlearned model survives a 4-bit quantization.

Quantizing an unlearned checkpoint can undo the unlearning (Zhang et al. 2024, "Catastrophic
failure of LLM unlearning via quantization"): fine-tuning moves most weights by less than
one quantization step, so the quantized unlearned model and the quantized original are
nearly the same model. This predicts that attack from the weights alone, before any
forward pass: per decoder layer, the fraction of the weights whose **dequantized** value
differs between the checkpoint (``model``) and the one it was unlearned from
(``base_model``), each side round-tripped by bitsandbytes' own ``quantize_4bit`` /
``dequantize_4bit`` (NF4, blocksize 64, as ``load_in_4bit`` does).

Values are compared, not codes: NF4 scales each block of 64 by its absmax, so one weight
that changes its block's absmax moves every value of the block, while a weight that moves
within its bucket changes nothing. Near 0: quantization maps the unlearned model back
onto the original. The weights compared are each layer's 2-D ``.weight`` tensors (the
linear layers ``load_in_4bit`` replaces; norms, embeddings and the head stay in full
precision there). Each side is quantized in its stored dtype (float16, bfloat16, float32;
another dtype as float32). ``agg_value`` is the fraction over every compared weight.
"""

from __future__ import annotations

from typing import Any, Literal

from ...engine import Params, Result, metric
from ...engine.quantize import round_trip_4bit

QUANTIZE_EXTRA = "pip install 'evaldag[quantize]'"


class QuantParams(Params):
    quant_type: Literal["nf4", "fp4"] = "nf4"
    blocksize: Literal[64, 128, 256, 512, 1024, 2048, 4096] = 64
    layers: tuple[int, ...] | None = None  # None: every decoder layer


def check_quantize_extra() -> None:
    """Before any work: bitsandbytes is installed, else a ValueError naming the extra."""
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ValueError(f"nf4_changed_fraction needs bitsandbytes: {QUANTIZE_EXTRA}")


def round_trip(weight: Any, quant_type: str = "nf4", blocksize: int = 64) -> Any:
    """``weight`` quantized and dequantized by bitsandbytes, in its own dtype where bitsandbytes takes it."""
    import torch

    if weight.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        weight = weight.to(torch.float32)
    return round_trip_4bit(weight, quant_type, blocksize)


def changed_count(original: Any, edited: Any, quant_type: str = "nf4", blocksize: int = 64) -> int:
    """How many entries differ after the round trip (0 without quantizing when the tensors are equal)."""
    import torch

    if original.dtype == edited.dtype and torch.equal(original, edited):
        return 0
    return int((round_trip(original, quant_type, blocksize) != round_trip(edited, quant_type, blocksize)).sum())


@metric("nf4_changed_fraction", version="1", params=QuantParams, needs=("weight_deltas",))
def nf4_changed_fraction(weight_deltas: Any, params: QuantParams) -> Result:
    """Per layer, the fraction of linear weights whose 4-bit round trip differs between the two checkpoints."""
    try:
        import bitsandbytes  # noqa: F401 - checked here so the failure names the extra
    except ImportError:
        raise RuntimeError(f"nf4_changed_fraction needs bitsandbytes: {QUANTIZE_EXTRA}") from None
    layers = list(params.layers) if params.layers is not None else list(range(weight_deltas.n_layers))
    shapes = weight_deltas.original.shapes()
    by_layer, changed_all, total_all = {}, 0, 0
    for layer in sorted(layers):
        names = [n for n in weight_deltas.layer_params(layer) if n.endswith(".weight") and len(shapes[n]) == 2]
        changed = total = 0
        for name in names:
            a, b = weight_deltas.pair(name)
            changed += changed_count(a, b, params.quant_type, params.blocksize)
            total += a.numel()
        by_layer[str(layer)] = changed / total if total else 0.0
        changed_all, total_all = changed_all + changed, total_all + total
    return Result(agg_value=changed_all / total_all if total_all else 0.0, value_by_index=by_layer,
                  extra={"quant_type": params.quant_type, "blocksize": params.blocksize,
                         "changed_weights": changed_all, "compared_weights": total_all})
