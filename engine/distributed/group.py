"""One process group over torch.distributed, and the few collectives the engine needs.

Every collective moves plain tensors: digests, masks, counts and the bytes of packed
results (safetensors with a checksummed JSON skeleton, the request cache's own format).
Nothing here pickles, so nothing a peer sends can execute code on load.

A collective that fails (a peer died, the link dropped, the timeout passed) raises
:class:`RankFailure` and marks the group broken; later collectives then fail at once
instead of each waiting for the timeout, and the CLI reports the failure and exits.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import timedelta
from typing import Any, Sequence

# How long one collective (and joining the group) may wait for the other ranks.
DEFAULT_TIMEOUT_S = 1800.0


class RankFailure(RuntimeError):
    """Another rank died or stopped answering; the job cannot go on."""


class PlanMismatch(ValueError):
    """The ranks built different plans (different data, metrics or models)."""


def launched() -> bool:
    """Whether this process was started as one of several ranks (torchrun sets WORLD_SIZE)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def timeout_s() -> float:
    return float(os.environ.get("EVALDAG_DIST_TIMEOUT", DEFAULT_TIMEOUT_S))


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


class Group:
    """This process's place in the job: ``rank`` of ``world``; rank 0 is the only writer."""

    def __init__(self, backend: str | None = None, timeout: float | None = None):
        import torch  # heavy: imported only when a job really has several ranks
        import torch.distributed as dist

        self._torch, self._dist = torch, dist
        self.timeout = timeout if timeout is not None else timeout_s()
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.broken: str | None = None
        # A group that already exists (a training job's: integrations/) is joined as it is, its
        # device left alone, and never destroyed by close(): that would end the training job.
        self.owned = not dist.is_initialized()
        if not self.owned:
            self.rank, self.world, self.backend = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
            self.device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")
            return
        cuda = torch.cuda.is_available()
        self.backend = backend or os.environ.get("EVALDAG_DIST_BACKEND") or ("nccl" if cuda else "gloo")
        if self.backend == "nccl":
            torch.cuda.set_device(self.local_rank)  # "cuda" now means this rank's own device
        self.device = torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        try:
            dist.init_process_group(self.backend, timeout=timedelta(seconds=self.timeout))
        except Exception as e:
            raise RankFailure(
                f"rank {self.rank} of {self.world} could not join the process group at {where} within "
                f"{self.timeout:g} s ({type(e).__name__}: {_first_line(e)}); check MASTER_ADDR/MASTER_PORT, "
                f"that the port is reachable from every node and that all {self.world} ranks were started "
                f"(EVALDAG_DIST_TIMEOUT sets the wait)") from None

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    def close(self) -> None:
        """Destroy the group this object made; a group it joined (a training job's) stays up."""
        if self.owned and self._dist.is_initialized():
            self._dist.destroy_process_group()

    # ------------------------------------------------------------------ collectives
    def _collective(self, what: str, fn: Any, *args: Any) -> Any:
        if self.broken:
            raise RankFailure(self.broken)
        try:
            return fn(*args)
        except Exception as e:
            self.broken = (f"rank {self.rank}: lost the other ranks during {what} ({type(e).__name__}: "
                           f"{_first_line(e)}); a rank died or hung past {self.timeout:g} s. Every finished "
                           f"batch and node is in the cache: rerun the same command to resume")
            raise RankFailure(self.broken) from None

    def min_ints(self, values: Sequence[int], what: str) -> list[int]:
        """Element-wise minimum over ranks (an agreed mask or budget)."""
        t = self._torch.tensor(list(values), dtype=self._torch.int64, device=self.device)
        if len(t):
            self._collective(what, self._dist.all_reduce, t, self._dist.ReduceOp.MIN)
        return [int(x) for x in t.tolist()]

    def sum_ints(self, values: Sequence[int], what: str) -> list[int]:
        """Element-wise sum over ranks (how many ranks still have work)."""
        t = self._torch.tensor(list(values), dtype=self._torch.int64, device=self.device)
        if len(t):
            self._collective(what, self._dist.all_reduce, t, self._dist.ReduceOp.SUM)
        return [int(x) for x in t.tolist()]

    def gather_ints(self, values: Sequence[int], what: str) -> list[list[int]]:
        """Every rank's ``values`` (the same length on every rank)."""
        t = self._torch.tensor(list(values), dtype=self._torch.int64, device=self.device)
        out = [self._torch.empty_like(t) for _ in range(self.world)]
        self._collective(what, self._dist.all_gather, out, t)
        return [[int(x) for x in o.tolist()] for o in out]

    def gather_bytes(self, blob: bytes, what: str) -> list[bytes]:
        """Every rank's ``blob``: sizes first, then one padded uint8 all_gather, trimmed."""
        sizes = [s[0] for s in self.gather_ints([len(blob)], what)]
        width = max(sizes)
        torch = self._torch
        t = torch.zeros(width, dtype=torch.uint8)
        if blob:
            t[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        t = t.to(self.device)
        out = [torch.empty_like(t) for _ in range(self.world)]
        self._collective(what, self._dist.all_gather, out, t)
        return [o[:n].cpu().numpy().tobytes() for o, n in zip(out, sizes)]

    def broadcast_bytes(self, blob: bytes, what: str) -> bytes:
        """Rank 0's ``blob`` on every rank (the others' ``blob`` is ignored)."""
        torch = self._torch
        n = torch.tensor([len(blob)], dtype=torch.int64, device=self.device)
        self._collective(what, self._dist.broadcast, n, 0)
        t = torch.zeros(int(n.item()), dtype=torch.uint8)
        if self.is_writer and blob:
            t[:] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        t = t.to(self.device)
        if len(t):
            self._collective(what, self._dist.broadcast, t, 0)
        return t.cpu().numpy().tobytes()

    def same(self, text: str, what: str) -> list[int]:
        """Ranks whose ``text`` differs from rank 0's (compared by sha256)."""
        d = digest(text)
        words = [int.from_bytes(d[i : i + 8], "little", signed=True) for i in range(0, 32, 8)]
        rows = self.gather_ints(words, what)
        return [r for r, row in enumerate(rows) if row != rows[0]]

    def raise_if_any(self, error: BaseException | None, what: str) -> None:
        """Raise the same error on every rank if any rank had one (keeps collectives in step)."""
        text = "" if error is None else f"{type(error).__name__}: {error}"
        blobs = self.gather_bytes(text.encode(), what)
        bad = [(r, b.decode()) for r, b in enumerate(blobs) if b]
        if bad:
            r, msg = bad[0]
            raise RuntimeError(f"rank {r} failed during {what}: {msg}")

    # ------------------------------------------------------------------ the plan
    def check_plan(self, nodes: dict[str, str]) -> None:
        """Refuse to start unless every rank built the same plan (``fingerprint -> label``)."""
        text = "\n".join(f"{fp} {label}" for fp, label in sorted(nodes.items()))
        differ = self.same(text, "the plan check")
        if not differ:
            return
        plans = [json.loads(b) for b in self.gather_bytes(json.dumps(nodes).encode(), "the plan check")]
        lines = []
        for r in differ:
            only_r = sorted(plans[r][fp] for fp in set(plans[r]) - set(plans[0]))
            only_0 = sorted(plans[0][fp] for fp in set(plans[0]) - set(plans[r]))
            lines.append(f"rank {r} built a different plan from rank 0: {len(plans[r])} vs {len(plans[0])} nodes; "
                         f"only on rank {r}: {', '.join(only_r[:5]) or '-'}; only on rank 0: {', '.join(only_0[:5]) or '-'}")
        raise PlanMismatch("; ".join(lines) + ". Every rank must get the same benchmarks, data, metrics and models")


def partition(costs: Sequence[int], world: int, load: list[int] | None = None) -> list[int]:
    """The rank of each item: longest first, each to the least loaded rank (ties: lowest rank).

    ``load`` (one number per rank) is the work already dealt out, and is updated: passing
    the same list for every request group balances the whole run, not each group alone
    (otherwise rank 0 would get the biggest batch of every group). Deterministic: every
    rank computes the same owners from the same costs and loads.
    """
    load = load if load is not None else [0] * world
    owner = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        r = min(range(world), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += costs[i]
    return owner


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
