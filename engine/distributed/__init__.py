"""Past one device: data-parallel forward passes over torch.distributed (see docs/scaling-out.md).

Launch with ``torchrun --nproc-per-node N --no-python evaldag run ...`` (or
``evaldag run ... --launcher torchrun --nproc-per-node N``). Importing this package does
not import torch; joining a group does.
"""

from .group import Group, PlanMismatch, RankFailure, launched, partition
from .sharded import RankStore, ShardedExecutor, prepare

__all__ = ["Group", "PlanMismatch", "RankFailure", "RankStore", "ShardedExecutor", "launched", "partition", "prepare"]
