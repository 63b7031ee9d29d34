"""Sharded weights (FSDP, FSDP2, DeepSpeed ZeRO-3): every rank takes part in every forward pass.

A model whose parameters are split over the ranks gathers each layer's weights from all
ranks inside its forward pass: a collective. The sharded executor still gives each rank
its own share of the batches (and exchanges the results, as for a replicated model), so
one rank may have more forward passes to make than another, and a rank that stops early
would leave the others waiting inside a gather forever. :class:`Lockstep` pairs them up:
before each real forward pass of the shared model a rank says so (an all-reduce of 1), and
a rank that has finished its share answers every such round with a 0 and a one-token
forward pass of its own, until a round in which every rank says 0. The numbers are those
of the replicated model: the gathered weights are the same tensors, and each batch is the
batch one process would have formed.

Only what goes through the root module's ``forward`` can be paired this way, and nothing
may run backward (a sharded backward reduces gradients over the ranks), so a sharded
in-memory model serves token statistics, generation (the adapter's own decode loop) and
hidden states; the planner refuses the other kinds in one line (``adapters/hf/``'s
``SHARDED_KINDS``).

The fingerprint of sharded weights hashes each rank's own shard and then the ranks'
digests in rank order, so it is the same on every rank, changes whenever any shard
changes, and never gathers the whole model. (It differs from the fingerprint of the same
weights held whole; the callback's alias of a saved checkpoint bridges the two.)

Tested on CPU with 2 gloo ranks for FSDP, FSDP2 and a DeepSpeed ZeRO-3 Trainer
(tests/engine/test_integrations_fsdp.py): byte-equal to a one-process run of the saved model.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Iterator

def sharding(model: Any) -> str | None:
    """``"fsdp"`` (FullyShardedDataParallel), ``"fsdp2"`` (``fully_shard``), ``"zero3"``
    (DeepSpeed ZeRO-3 partitioned parameters) or None for weights every rank holds whole."""
    import torch  # heavy: only the callback asks, with a model in hand

    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    modules = list(model.modules())
    if any(isinstance(m, FullyShardedDataParallel) for m in modules):
        return "fsdp"
    if any(isinstance(m, FSDPModule) for m in modules):
        return "fsdp2"
    if any(hasattr(p, "ds_id") for p in model.parameters()):
        return "zero3"
    return None


def local_tensors(model: Any) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of what this rank holds: its shards and its (replicated) buffers."""
    for name, p in sorted(model.named_parameters()):
        if hasattr(p, "to_local"):  # FSDP2: a DTensor
            yield name, p.to_local()
        elif hasattr(p, "ds_tensor"):  # ZeRO-3: the partition this rank owns
            yield name, p.ds_tensor
        else:  # FSDP: the flat parameter's shard (its storage is this rank's piece)
            yield name, p
    yield from sorted(model.named_buffers())


def weights_digest(model: Any, group: Any) -> str:
    """One digest of the sharded weights, equal on every rank (see the module docstring)."""
    import torch

    h = hashlib.sha256()
    for name, t in local_tensors(model):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    ranks = group.gather_bytes(h.digest(), "the sharded weights' fingerprint")
    return hashlib.sha256(f"sharded-1|world={group.world}|".encode() + b"".join(ranks)).hexdigest()


def full_state_dict(model: Any) -> dict[str, Any]:
    """The whole model's tensors on rank 0's CPU (empty on the other ranks). A collective:
    every rank calls it. Used to check a saved checkpoint against the evaluated weights."""
    kind = sharding(model)
    if kind == "zero3":  # one parameter gathered at a time: never the whole model on every rank
        import deepspeed  # only where ZeRO-3 trains, so it is installed

        first = _rank() == 0
        state = {}
        for name, p in model.named_parameters():
            with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                if first:
                    state[name] = p.detach().to("cpu").clone()
        if first:
            state.update((n, b.detach().to("cpu").clone()) for n, b in model.named_buffers())
        return state
    if kind == "fsdp":  # FSDP's own full state dict: rank 0 only, moved to its CPU unless it is there already
        from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

        # (offload_to_cpu=True on a CPU-only job leaves rank 0 an empty storage: torch 2.13, measured)
        offload = next(iter(model.parameters())).device.type != "cpu"
        with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                                      FullStateDictConfig(offload_to_cpu=offload, rank0_only=True)):
            return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _rank() -> int:
    import torch

    return torch.distributed.get_rank()


class Lockstep:
    """Pairs every rank's forward passes of one sharded model (see the module docstring)."""

    def __init__(self, group: Any, model: Any, token_id: int):
        self.group, self.model, self.token_id = group, model, int(token_id)
        self.quiet = False  # True during a rank's own filler pass: it is not announced
        self.fillers = 0  # one-token passes this rank made to keep the others company

    def _announce(self, module: Any, args: Any) -> None:
        if not self.quiet:
            self.group.sum_ints([1], "a sharded forward pass")

    @contextlib.contextmanager
    def serving(self) -> Iterator["Lockstep"]:
        """While inside, each forward pass of the model is announced; on the way out (also
        after an error, so no other rank is left waiting) this rank fills in until all are done."""
        # first among the pre-hooks: FSDP2 and ZeRO-3 gather the root's weights in theirs, and the
        # announcement must come before that gather on every rank, as the filler's does
        handle = self.model.register_forward_pre_hook(self._announce, prepend=True)
        try:
            yield self
        finally:
            handle.remove()
            if not self.group.broken:
                self.drain()

    def drain(self) -> None:
        import torch

        device = next(iter(self.model.parameters())).device
        ids = torch.tensor([[self.token_id]], dtype=torch.long, device=device)
        while self.group.sum_ints([0], "a sharded forward pass")[0]:
            self.quiet = True
            try:
                with torch.no_grad():
                    self.model(input_ids=ids, use_cache=False)
            finally:
                self.quiet = False
            self.fillers += 1
