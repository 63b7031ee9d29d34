"""The ``down_proj_keys`` request kind and its HF handler: the inputs of an MLP's down-projection.

ROME reads an MLP's down-projection W as a key-value memory: its *input* at a token is the
key k (``rome/compute_u.py`` tracks ``rewrite_module_tmp`` with ``track="in"``), the
covariance of those keys over a corpus conditions the update, and the scalar the update
divides by is ``k . u``. :class:`~evaldag.engine.requests.HiddenStates` returns the
residual stream, not these inputs; this kind hooks the down-projection itself.

Importing this module registers :class:`DownProjKeys` (``requests.register_kind``) and
its handler on :class:`~evaldag.engine.adapters.hf.hf_adapter.HFAdapter`. A batch of
requests runs in one forward pass per (layer, length): rows of equal length, unpadded,
through the model's base only where the adapter can split off the output head (no logits
are made). Why not padded: ROME inverts the keys' covariance, which is ill-conditioned
(condition number 3e7 on the trace model at block 2); padding moves float32 keys by ~1e-7,
which moved u^T C^-1 u by 1.4e-6 relative, while equal-length rows give the very keys of
one sequence alone (checked bit for bit on the trace model's corpus), the executor's
longest-first packing keeps lengths together. torch is imported inside functions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from ...engine.adapters.hf.hf_adapter import HFAdapter
from ...engine.adapters.layer_names import layer_names
from ...engine.requests import ArrayResult, Request, register_kind


@dataclass(frozen=True)
class DownProjKeys(Request):
    """Layer ``layer``'s down-projection inputs for ``ids``, at ``positions`` (empty: every position)."""

    ids: tuple[int, ...]
    layer: int
    positions: tuple[int, ...] = ()
    kind: ClassVar[str] = "down_proj_keys"
    words: ClassVar[str] = "MLP down-projection inputs (ROME's keys)"
    padding_side: ClassVar[str] = "right"

    def __post_init__(self) -> None:
        bad = [p for p in self.positions if not 0 <= p < len(self.ids)]
        if bad or self.layer < 0 or not self.ids:
            raise ValueError(f"DownProjKeys: positions {bad} / layer {self.layer} out of range for {len(self.ids)} tokens")

    def length(self) -> int:
        return len(self.ids)


@dataclass
class DownProjKeysResult(ArrayResult):
    """``keys[i]``: the input at the i-th asked position (every position when none were asked), float32."""

    keys: np.ndarray


def run_keys(adapter: Any, reqs: Sequence[DownProjKeys]) -> list[DownProjKeysResult]:
    """One unpadded forward per (layer, length); the hook keeps the down-projection's input."""
    import torch

    model = adapter.model
    split = adapter.head_split()  # its one-off probe forward runs before any hook is registered
    names = layer_names(str(model.config.to_dict().get("model_type")))
    modules = dict(model.named_modules())
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, r in enumerate(reqs):
        groups[(r.layer, len(r.ids))].append(i)
    out: list[DownProjKeysResult | None] = [None] * len(reqs)
    real = 0
    for (layer, _), idx in sorted(groups.items()):
        name = names.module("mlp_down_proj", layer)
        if name not in modules:
            raise ValueError(f"down_proj_keys: the model has no module {name} (layer {layer})")
        seqs = [reqs[i].ids for i in idx]
        ids = torch.tensor(seqs, device=model.device)
        mask = torch.ones_like(ids)
        got: list[Any] = []
        handle = modules[name].register_forward_hook(lambda _m, inp, _out: got.append(inp[0].detach()))
        try:
            with torch.inference_mode():
                (split[0] if split else model)(input_ids=ids, attention_mask=mask, use_cache=False)
        finally:
            handle.remove()
        keys = got[0].float().cpu().numpy()
        for row, i in enumerate(idx):
            r = reqs[i]
            pos = list(r.positions) if r.positions else list(range(len(r.ids)))
            out[i] = DownProjKeysResult(np.ascontiguousarray(keys[row, pos]))
        real += int(ids.numel())
    adapter.record_tokens(real, real)  # nothing padded
    return out  # type: ignore[return-value]


register_kind(DownProjKeys, DownProjKeysResult)
HFAdapter.handlers.add("down_proj_keys", run_keys)
