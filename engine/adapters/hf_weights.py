"""Weight deltas between two checkpoints, read tensor by tensor.

:class:`WeightDeltas` is what the ``weight_deltas`` provider hands to metrics:
``original - edited`` per named parameter (lm-debugger's sign), computed on first use
and remembered. Checkpoint directories are read with ``safetensors.safe_open`` one
tensor at a time from each side, so two large models never sit in memory together;
only the non-zero deltas are kept (an edit touches a few matrices). Models built in
memory (``HFModel.from_pretrained_objects``) are read from their state dicts.

:func:`check_pair` compares the two configs and tensor shapes from the file headers,
before any weight is read or any forward pass runs. torch is imported inside functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .layer_names import LayerNames, layer_names, num_layers, read_config

# Heavy imports (torch and safetensors) happen inside the functions that use them: a warm rerun never pays for them.

# config fields that must agree for two checkpoints to be "the same model, edited"
SAME_FIELDS = ("model_type", "num_hidden_layers", "n_layer", "hidden_size", "n_embd", "intermediate_size",
               "vocab_size", "num_attention_heads", "n_head")


class _Tensors:
    """Named tensors of one model: safetensors files of a directory, or a state dict."""

    def __init__(self, model: Any):
        self.label = getattr(model, "path", "in-memory model")
        self._files: dict[str, Path] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._state: dict[str, Any] | None = None
        if getattr(model, "is_dir", False):
            self._index(Path(model.path).expanduser())
            self.config = read_config(Path(model.path).expanduser())
        else:  # in memory: its state dict (already in memory, nothing to stream)
            net = model.load().model
            self._state = {k: v.detach() for k, v in net.state_dict().items()}
            self._shapes = {k: tuple(v.shape) for k, v in self._state.items()}
            self.config = net.config.to_dict()

    def _index(self, root: Path) -> None:
        """Tensor names and shapes from each file's header (JSON after an 8-byte length): no torch, no weights."""
        files = sorted(root.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{root}: weight deltas are read from *.safetensors files and there are none "
                                    "(save the checkpoint with save_pretrained(..., safe_serialization=True))")
        for f in files:
            with open(f, "rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                try:
                    header = json.loads(fh.read(n))
                except ValueError as e:
                    raise ValueError(f"{f}: not a safetensors file ({e})") from None
            for name, info in header.items():
                if name != "__metadata__":
                    self._files[name] = f
                    self._shapes[name] = tuple(info["shape"])

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self._shapes

    def get(self, name: str) -> Any:
        if self._state is not None:
            return self._state[name]
        from safetensors import safe_open

        with safe_open(str(self._files[name]), framework="pt") as h:
            return h.get_tensor(name)


def _architecture(cfg: dict[str, Any]) -> tuple:
    return tuple((k, cfg.get(k)) for k in SAME_FIELDS if k in cfg)


def check_pair(original: _Tensors, edited: _Tensors) -> None:
    """Same architecture, same parameter names, same shapes; otherwise a ValueError naming the difference."""
    a, b = _architecture(original.config), _architecture(edited.config)
    if a != b:
        diff = [f"{k}: {dict(a).get(k)!r} vs {dict(b).get(k)!r}" for k in dict(a) | dict(b) if dict(a).get(k) != dict(b).get(k)]
        raise ValueError(f"base model {original.label} and edited model {edited.label} are different architectures "
                         f"({'; '.join(diff)})")
    sa, sb = original.shapes(), edited.shapes()
    # tied output embeddings may be stored on one side only: compare what both sides name
    only = sorted((set(sa) ^ set(sb)) - {"lm_head.weight"})
    if only:
        raise ValueError(f"base model {original.label} and edited model {edited.label} have different parameters: "
                         f"{', '.join(only[:5])}{' ...' if len(only) > 5 else ''}")
    for name in sorted(set(sa) & set(sb)):
        if sa[name] != sb[name]:
            raise ValueError(f"parameter {name} has shape {list(sa[name])} in the base model {original.label} "
                             f"and {list(sb[name])} in the edited model {edited.label}")


def check_model_dirs(original_dir: str | Path, edited_dir: str | Path) -> None:
    """:func:`check_pair` for two checkpoint directories (headers only: no weights read)."""

    class _Dir:
        is_dir = True

        def __init__(self, p: str | Path):
            self.path = str(p)

    check_pair(_Tensors(_Dir(original_dir)), _Tensors(_Dir(edited_dir)))


class WeightDeltas:
    """``original - edited`` per parameter name, computed lazily, each tensor once.

    ``delta(name)`` streams one tensor from each side; ``layer(L)`` gives every
    parameter of layer L (lm-debugger's ``get_weight_deltas([L])``);
    ``nonzero_layers()`` streams every tensor once and keeps only the non-zero deltas.
    Deltas are float32 CPU tensors (float64 if a checkpoint stores float64).
    """

    def __init__(self, original: Any, edited: Any):
        self.original, self.edited = _Tensors(original), _Tensors(edited)
        check_pair(self.original, self.edited)
        self.config = self.original.config
        self.names: LayerNames = layer_names(str(self.config.get("model_type")))
        self.n_layers = num_layers(self.config)
        shapes = self.original.shapes()
        self.param_names = sorted(set(shapes) & set(self.edited.shapes()))
        self._nonzero: dict[str, Any] = {}
        self._zero: dict[str, Any] = {}  # name -> dtype of a delta that is all zeros
        self.tensors_read = 0  # per side; tests check that nothing is read twice

    def delta(self, name: str) -> Any:
        import torch

        if name in self._nonzero:
            return self._nonzero[name]
        if name in self._zero:  # known to be all zeros: nothing to read again
            return torch.zeros(self.original.shapes()[name], dtype=self._zero[name])
        if name not in self.param_names:
            raise KeyError(f"no parameter {name!r} in both models")

        a = self.original.get(name)
        dtype = torch.float64 if a.dtype == torch.float64 else torch.float32
        d = a.to(dtype) - self.edited.get(name).to(dtype)
        self.tensors_read += 1
        if bool(torch.any(d != 0)):
            self._nonzero[name] = d
        else:
            self._zero[name] = dtype
        return d

    def pair(self, name: str) -> tuple[Any, Any]:
        """``(original, edited)`` tensors of ``name`` as stored (their dtype), read now and not
        kept: for a metric that transforms each side before comparing (a quantization round trip)."""
        if name not in self.param_names:
            raise KeyError(f"no parameter {name!r} in both models")
        return self.original.get(name), self.edited.get(name)

    def layer_params(self, layer: int) -> list[str]:
        self.check_layer(layer)
        return [n for n in self.param_names if self.names.layer_of(n) == layer]

    def layer(self, layer: int) -> dict[str, Any]:
        return {n: self.delta(n) for n in self.layer_params(layer)}

    def down_proj(self, layer: int) -> Any:
        """The delta of layer ``layer``'s MLP down-projection weight (lm-debugger's mlp_down_proj)."""
        self.check_layer(layer)
        return self.delta(self.names.module("mlp_down_proj", layer) + ".weight")

    def changed(self, names: Iterable[str] | None = None) -> list[str]:
        """Parameters whose delta is not all zeros (every parameter is read once, then remembered)."""
        out = []
        for n in self.param_names if names is None else names:
            if n not in self._nonzero and n not in self._zero:
                self.delta(n)
            if n in self._nonzero:
                out.append(n)
        return out

    def nonzero_layers(self) -> list[int]:
        layers = {self.names.layer_of(n) for n in self.changed()}
        return sorted(x for x in layers if x is not None)

    def check_layer(self, layer: int) -> None:
        if not 0 <= int(layer) < self.n_layers:
            raise ValueError(f"layer {layer} is out of range: the model has {self.n_layers} layers (0..{self.n_layers - 1})")

    def describe(self) -> dict:
        return {"n_layers": self.n_layers, "model_type": self.config.get("model_type"),
                "changed": json.dumps(sorted(self._nonzero))}
