"""``--attack quantize:nf4|fp4|int8-weight``: the weights bitsandbytes would store, round-tripped.

Each decoder ``nn.Linear`` weight W is replaced by bitsandbytes' own
``dequantize(quantize(W))``, and nothing else is touched: the output head (``lm_head``, or
whatever ``get_output_embeddings`` names) and the embeddings stay, as transformers'
bitsandbytes integration leaves them (``get_keys_to_not_convert``); biases stay too.

* ``nf4`` / ``fp4``: ``bitsandbytes.functional.quantize_4bit(W, blocksize, quant_type,
  compress_statistics=double_quant)`` then ``dequantize_4bit``, on W in the dtype the model
  was loaded in, as ``Params4bit`` quantizes it: the dequantized weight a ``Linear4bit`` of
  ``load_in_4bit`` holds, bit for bit.
* ``int8-weight``: ``int8_vectorwise_quant`` (row-wise absmax to int8) of W cast to float16,
  as ``Int8Params`` stores it, then ``int8_vectorwise_dequant``. Weights only: LLM.int8()
  inference also quantizes the activations and keeps outlier columns (threshold 6.0) in
  float16, which this does not reproduce, so no equivalence with it is claimed.
* ``load=bnb``: bitsandbytes' kernel path instead of the round trip: each decoder Linear
  becomes a ``bitsandbytes.nn.Linear4bit`` (nf4, fp4), as transformers' ``load_in_4bit`` makes it,
  and bitsandbytes' own kernels compute with it (on a CPU with AVX512-BF16 a fused bf16 kernel,
  docs/model-attacks.md); no gradient kinds then.
* ``compute_dtype``: the dtype bitsandbytes' matmul runs in. ``auto`` (default): the model's
  own; ``bf16``/``fp16``: the dequantized weight is rounded to it, as
  ``dequantize_4bit(...).to(compute_dtype)`` does before the matmul (the activations
  stay in the model's dtype; docs/model-attacks.md says what that leaves out).

Every parameter is part of the derived fingerprint. The round trip is cheap and
deterministic, so it is recomputed at load rather than stored. Other quantizers (GPTQ, AWQ,
GGUF types) are transforms of their own beside this one.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from typing import Any, Literal

import pydantic

from .backend import Capabilities
from .requests import REQUEST_TYPES
from .transforms import Transform, TransformError

EXTRA = "pip install 'evaldag[quantize]'"
BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class QuantizeParams(pydantic.BaseModel):
    """``method``; for nf4/fp4 ``blocksize`` (64) and ``double_quant`` (the absmax statistics
    quantized too: bitsandbytes' ``compress_statistics``); ``compute_dtype`` (auto)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    method: Literal["nf4", "fp4", "int8-weight"] = "nf4"
    blocksize: int | None = None
    double_quant: bool = False
    compute_dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    load: Literal["roundtrip", "bnb"] = "roundtrip"

    @pydantic.model_validator(mode="before")
    @classmethod
    def _default_blocksize(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("method", "nf4") != "int8-weight" and data.get("blocksize") is None:
            data = {**data, "blocksize": 64}
        return data

    @pydantic.model_validator(mode="after")
    def _fits_the_method(self) -> "QuantizeParams":
        if self.method == "int8-weight" and (self.blocksize is not None or self.double_quant):
            raise ValueError("int8-weight is row-wise: it takes no blocksize or double_quant")
        if self.method != "int8-weight" and self.blocksize not in BLOCKSIZES:
            raise ValueError(f"blocksize must be one of {', '.join(map(str, BLOCKSIZES))}")
        if self.method == "int8-weight" and self.load == "bnb":
            raise ValueError("load=bnb runs bitsandbytes' 4-bit kernels (nf4, fp4); int8-weight is the weights only "
                             "(bitsandbytes' 8-bit kernel is LLM.int8() inference, not offered)")
        return self


class Quantize(Transform):
    """The built-in quantization model attack (see the module's text)."""

    name = "quantize"
    version = "1"
    Params = QuantizeParams
    positional = "method"

    def check(self) -> None:
        if not _installed("bitsandbytes"):
            raise TransformError(f"--attack {self.text}: needs bitsandbytes (the evaldag[quantize] extra): {EXTRA}")

    def apply(self, model: Any, tokenizer: Any) -> Any:
        self.check()
        import torch

        with torch.no_grad():
            for name, module in quantized_linears(model):
                if self.params.load == "bnb":
                    holder, _, attr = name.rpartition(".")
                    setattr(model.get_submodule(holder), attr, self.linear4bit(module))
                else:
                    module.weight.copy_(self.round_trip(module.weight.data))
        return model

    def capabilities(self, caps: Any) -> Any:
        """``load=bnb``: bitsandbytes' quantized weights take no gradient, so the kinds that
        need a backward pass (``cost_rank`` 2: per-sample gradient norms) are not served (the
        planner names the metric that needs one); the round trip serves what its parent does."""
        if self.params.load != "bnb":
            return caps
        backward = {k for k in caps.kinds if getattr(REQUEST_TYPES.get(k), "cost_rank", 0) >= 2}
        return Capabilities(caps.kinds - backward, caps.token_fields)

    def linear4bit(self, linear: Any) -> Any:
        """``linear`` as transformers' ``load_in_4bit`` makes it: a ``bitsandbytes.nn.Linear4bit``
        whose weight bitsandbytes quantizes when it is moved to its device (its own kernels serve it)."""
        import torch

        _functional()
        import bitsandbytes as bnb

        p, w = self.params, linear.weight
        compute = w.dtype if p.compute_dtype == "auto" else getattr(torch, DTYPES[p.compute_dtype])
        new = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                                compute_dtype=compute, compress_statistics=p.double_quant, quant_type=p.method,
                                device="meta")
        new.weight = bnb.nn.Params4bit(w.data.clone(), requires_grad=False, blocksize=p.blocksize,
                                       compress_statistics=p.double_quant, quant_type=p.method, module=new)
        if linear.bias is not None:
            new.bias = torch.nn.Parameter(linear.bias.data.clone(), requires_grad=False)
        return new.to(w.device).train(linear.training)

    def round_trip(self, w: Any) -> Any:
        """``w`` as bitsandbytes would store it, dequantized, in ``w``'s dtype."""
        import torch

        F = _functional()
        p = self.params
        if p.method == "int8-weight":
            cb, stats, _ = F.int8_vectorwise_quant(w.contiguous().to(torch.float16))
            out = F.int8_vectorwise_dequant(cb, stats)
        else:
            out = round_trip_4bit(w, p.method, p.blocksize, p.double_quant)
        if p.compute_dtype != "auto":
            out = out.to(getattr(torch, DTYPES[p.compute_dtype]))
        return out.to(w.dtype)


def round_trip_4bit(w: Any, method: str = "nf4", blocksize: int = 64, double_quant: bool = False) -> Any:
    """``w`` through bitsandbytes' ``quantize_4bit`` and back (nf4 or fp4), in bitsandbytes' output
    dtype; the one definition the quantize model attack and ``nf4_changed_fraction`` share."""
    F = _functional()
    packed, state = F.quantize_4bit(w.contiguous(), blocksize=blocksize, quant_type=method,
                                    compress_statistics=double_quant)
    return F.dequantize_4bit(packed, state)


def quantized_linears(model: Any) -> list[tuple[str, Any]]:
    """(name, module) of every ``nn.Linear`` a bitsandbytes load quantizes: all of them but the
    output head (and any module sharing its weight: tied embeddings are not Linear anyway)."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    skip = {id(head.weight)} if head is not None and getattr(head, "weight", None) is not None else set()
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and m is not head and id(m.weight) not in skip]


def _functional() -> Any:
    """``bitsandbytes.functional``, imported without its warning that the optional ``kernels``
    package (a fused CPU matmul) is missing: the round trip never uses that kernel."""
    quiet = logging.getLogger("bitsandbytes.backends.cpu.ops")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from bitsandbytes import functional
    finally:
        quiet.setLevel(level)
    return functional


def _installed(module: str) -> bool:
    """Importable, found without importing it; ``sys.modules[name] = None`` counts as missing."""
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None
