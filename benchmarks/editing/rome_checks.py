"""Before any forward pass: which layers the ROME diagnostics read, and that each can be read.

The layers are ``--rome-layers`` or the manipulated ones (the ``manipulated_layers``
provider's rule, read here from the two folders' safetensors, so the graph has one
covariance node per layer). A layer whose down-projection is all zeros (the trace model's
blocks 0, 1, 4 and 5) has keys that move nothing: refused from its weights alone. Without
a ridge, a corpus with fewer tokens than the layer has keys gives a singular covariance
for sure: counted with the tokenizer file alone and refused before the corpus pass (a
covariance singular for another reason fails its node, naming its rank).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ...engine.adapters import spec as specs
from ...engine.adapters.hf.hf_weights import WeightDeltas
from ...engine.adapters.layer_names import layer_names, num_layers, read_config


@lru_cache(maxsize=4)
def _manipulated(model: str, base_model: str) -> tuple[int, ...]:
    folders = [SimpleNamespace(path=p, is_dir=True) for p in (base_model, model)]
    return tuple(WeightDeltas(*folders).nonzero_layers())


def _folder(path: str | None, flag: str) -> Path | None:
    """The local checkpoint folder an ``hf`` spec (``hf:DIR`` or a bare path) names, else None."""
    if not path:
        return None
    parsed = specs.parse(path, flag)
    folder = Path(parsed.target).expanduser()
    return folder if parsed.scheme == "hf" and folder.is_dir() else None


def rome_layers(cfg: Any) -> tuple[int, ...]:
    """``cfg.rome_layers``, else the layers whose weights differ between --base-model and --model."""
    if cfg.rome_layers is not None:
        return tuple(cfg.rome_layers)
    model, base = _folder(cfg.model, "--model"), _folder(cfg.base_model, "--base-model")
    if model is None or base is None:
        raise ValueError("rome_denominator / rome_key_ood: give --rome-layers L,... (the manipulated layers are "
                         "read from two local checkpoint folders, --model and --base-model)")
    layers = _manipulated(str(model), str(base))
    if not layers:
        raise ValueError("rome_denominator / rome_key_ood: --model and --base-model have the same weights, so no "
                         "layer was edited; give --rome-layers L,...")
    return layers


def _tensor(folder: Path, name: str) -> Any:
    from safetensors import safe_open

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            if name in h.keys():
                return h.get_tensor(name)
    return None


def corpus_tokens(folder: Path, texts: list[str]) -> int | None:
    """Tokens of the corpus as the model's tokenizer.json counts them (special tokens added), or None."""
    if not (folder / "tokenizer.json").is_file():
        return None
    from tokenizers import Tokenizer  # the Rust tokenizer alone: no transformers, no torch

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return sum(len(e.ids) for e in tok.encode_batch(texts))


def check_rome_layers(cfg: Any, corpus: list[str] | None = None) -> None:
    """Each layer in range and its down-projection (in --model) not all zeros; the corpus file
    there and, without a ridge, at least as many tokens as the layer has keys."""
    if not cfg.corpus or not Path(cfg.corpus).expanduser().is_file():
        raise ValueError(f"--corpus {cfg.corpus}: no such file")
    folder = _folder(cfg.model, "--model")
    if folder is None:
        return  # a hub id or a server: checked when it loads (the planner refuses a backend without the keys)
    config = read_config(folder)
    n = num_layers(config)
    names = layer_names(str(config.get("model_type")))
    for layer in rome_layers(cfg):
        if not 0 <= layer < n:
            raise ValueError(f"--rome-layers: layer {layer} is out of range: the model has {n} layers (0..{n - 1})")
        name = names.module("mlp_down_proj", layer) + ".weight"
        weight = _tensor(folder, name)
        if weight is not None and not bool(weight.any()):
            raise ValueError(f"--rome-layers: layer {layer}'s down-projection ({name}) is all zeros in --model {cfg.model}: "
                             "its keys change nothing, so ROME's update there is undefined; pick another layer")
        keys = None if weight is None else int(weight.shape[0 if config.get("model_type") == "gpt2" else 1])
        tokens = corpus_tokens(folder, corpus) if keys and corpus is not None and not cfg.cov_ridge else None
        if tokens is not None and tokens < keys:
            raise ValueError(f"--corpus {cfg.corpus}: {tokens} tokens, fewer than the {keys} keys of layer {layer}'s "
                             f"down-projection, so their covariance is singular (rank at most {tokens}): give --cov-ridge R "
                             "(make_edit --method rome uses 0.01) or a larger --corpus")
