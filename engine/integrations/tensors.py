"""Whether a saved folder holds exactly the tensors of a model in memory (before an alias is recorded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def same_tensors(folder: Path, state: dict[str, Any]) -> bool:
    """Every tensor of every ``*.safetensors`` file in ``folder`` equals the tensor of that name
    in ``state`` (the model's state dict: dtype, shape and bits), and at least one was compared.
    Names the file leaves out (tied weights) are the ones the model shares with a saved tensor.
    ``.bin`` checkpoints: False."""
    import torch  # heavy: only when a checkpoint is saved
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return False
    compared = 0
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                mine = state.get(name)
                saved = f.get_tensor(name)
                if mine is None or mine.dtype != saved.dtype or mine.shape != saved.shape:
                    return False
                if not torch.equal(mine.detach().to("cpu"), saved):
                    return False
                compared += 1
    return compared > 0
