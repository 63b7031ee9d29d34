"""Where each architecture keeps its layers: module-name templates per ``model_type``.

lm-debugger's ``layer_mappings`` (``mlp_down_proj: "transformer.h.{}.mlp.c_proj"``) as a
small table. ``{}`` is the layer index. Used by the weight-delta reader (which tensor is
layer L's MLP down-projection) and by the patched forwards of causal tracing (which
modules to hook). Pure data and string work: no torch.

GPT-2's ``c_proj`` is a ``Conv1D`` whose weight is stored transposed ([in, out]); the
Frobenius and spectral norms do not care, a caller that multiplies by it must.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LayerNames:
    """Module-name templates of one architecture (``{}`` = layer index)."""

    embed: str           # token embedding module (noise goes on its output)
    layer: str           # one transformer block (its output is the residual stream)
    mlp: str             # the block's MLP
    attn: str            # the block's attention
    mlp_down_proj: str   # the MLP's output projection (what ROME edits)

    def module(self, kind: str, layer: int | None = None) -> str:
        template = {"embed": self.embed, "hidden": self.layer, "mlp": self.mlp, "attn": self.attn,
                    "mlp_down_proj": self.mlp_down_proj}[kind]
        return template.format(layer) if "{}" in template else template

    def layer_of(self, param_name: str) -> int | None:
        """The layer index a parameter name belongs to (None for embeddings, final norm, head)."""
        prefix = re.escape(self.layer.split("{}")[0])
        m = re.match(prefix + r"(\d+)\.", param_name)
        return int(m.group(1)) if m else None


_LLAMA = LayerNames(embed="model.embed_tokens", layer="model.layers.{}", mlp="model.layers.{}.mlp",
                    attn="model.layers.{}.self_attn", mlp_down_proj="model.layers.{}.mlp.down_proj")

ARCHITECTURES: dict[str, LayerNames] = {
    "llama": _LLAMA,
    "qwen2": _LLAMA,
    "mistral": _LLAMA,
    "gpt2": LayerNames(embed="transformer.wte", layer="transformer.h.{}", mlp="transformer.h.{}.mlp",
                       attn="transformer.h.{}.attn", mlp_down_proj="transformer.h.{}.mlp.c_proj"),
    "gpt_neox": LayerNames(embed="gpt_neox.embed_in", layer="gpt_neox.layers.{}", mlp="gpt_neox.layers.{}.mlp",
                           attn="gpt_neox.layers.{}.attention", mlp_down_proj="gpt_neox.layers.{}.mlp.dense_4h_to_h"),
}


def layer_names(model_type: str) -> LayerNames:
    try:
        return ARCHITECTURES[model_type]
    except KeyError:
        raise ValueError(f"no layer-name mapping for model_type {model_type!r}; known: "
                         f"{', '.join(sorted(ARCHITECTURES))} (add one to evaldag.engine.adapters.layer_names.ARCHITECTURES)") from None


def read_config(model_dir: str | Path) -> dict[str, Any]:
    """A checkpoint directory's config.json (a clear error if it is missing)."""
    path = Path(model_dir).expanduser() / "config.json"
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise FileNotFoundError(f"no readable config.json in {model_dir}: {e}") from None


def num_layers(config: dict[str, Any]) -> int:
    for key in ("num_hidden_layers", "n_layer"):
        if isinstance(config.get(key), int):
            return config[key]
    raise ValueError(f"config of model_type {config.get('model_type')!r} names no layer count")
