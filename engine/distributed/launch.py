"""The CLI's side of a distributed run: its options, ``--launcher torchrun``, joining the group.

``evaldag run ... --launcher torchrun --nproc-per-node N`` replaces this process with
``python -m torch.distributed.run --nproc-per-node N -m evaldag.engine.cli run ...``
(the same command without the launcher options), which is what a user would type. The
package's ``__main__`` is the entry: ``-m evaldag.engine.cli.main`` made runpy warn once per
rank that the module was already imported.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .group import Group, RankFailure, launched

# option -> how many values it takes; removed from the command line handed to torchrun
_LAUNCH_OPTIONS = {"--launcher": 1, "--nproc-per-node": 1, "--nnodes": 1, "--rdzv-endpoint": 1}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("distributed (see docs/scaling-out.md)")
    g.add_argument("--launcher", choices=["none", "torchrun"], default="none",
                   help="'torchrun': start the run under torchrun (data-parallel forward passes over the ranks)")
    g.add_argument("--nproc-per-node", default="1", help="with --launcher torchrun: processes per node (e.g. GPUs)")
    g.add_argument("--nnodes", default="1", help="with --launcher torchrun: number of nodes (needs --rdzv-endpoint)")
    g.add_argument("--rdzv-endpoint", default=None, help="with --launcher torchrun and --nnodes > 1: HOST:PORT of the c10d rendezvous")
    g.add_argument("--parallel", choices=["auto", "checkpoints", "requests"], default="auto",
                   help="a sweep under torchrun: 'checkpoints' gives each rank whole checkpoints (each loaded once, "
                        "the retain/reference work done once by all); 'requests' spreads every checkpoint's requests "
                        "over all ranks; 'auto' (default): checkpoints when there are at least as many as ranks")


def torchrun_command(argv: list[str], nproc_per_node: str = "1", nnodes: str = "1",
                     rdzv_endpoint: str | None = None) -> list[str]:
    """The torchrun command line equivalent to ``evaldag <argv>`` with the launcher options."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc_per_node)]
    if str(nnodes) == "1":
        cmd.append("--standalone")  # one node: a rendezvous on localhost at a free port
    else:
        if not rdzv_endpoint:
            raise SystemExit("evaldag: --nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
        cmd += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                "--rdzv-id", os.environ.get("EVALDAG_RDZV_ID", "evaldag")]
    return [*cmd, "-m", "evaldag.engine.cli", *_without_launch_options(argv)]


def exec_torchrun(argv: list[str], **launcher: Any) -> int:  # pragma: no cover - replaces the process
    """Replace this process with torchrun running ``evaldag <argv>`` (``launcher``: :func:`torchrun_command`'s options)."""
    if launched():
        raise SystemExit("evaldag: --launcher torchrun inside a torchrun job; drop --launcher")
    cmd = torchrun_command(argv, **launcher)
    os.execv(cmd[0], cmd)
    return 0


def _without_launch_options(argv: list[str]) -> list[str]:
    out, skip = [], 0
    for w in argv:
        if skip:
            skip -= 1
            continue
        name = w.split("=", 1)[0]
        if name in _LAUNCH_OPTIONS:
            skip = 0 if "=" in w else _LAUNCH_OPTIONS[name]
            continue
        out.append(w)
    return out


def join() -> Group | None:
    """This process's group when torchrun started several ranks, else None (no torch import)."""
    return Group() if launched() else None


def finish(group: Group | None, result: Any) -> int | None:
    """After ``run()``: the exit code for a broken job or a non-writing rank; None for rank 0 to
    go on and write the outputs."""
    if group is None:
        return None
    if group.broken:
        print(f"evaldag: error: {group.broken}", file=sys.stderr)
        return 1
    if group.is_writer:
        return None
    for rec in result.failures():  # rank 0 writes the outputs; a failure seen only here must still be said
        print(f"evaldag: rank {group.rank}: FAILED {rec.name}: {rec.problem}", file=sys.stderr)
    return 0 if result.ok else 1


__all__ = ["RankFailure", "add_arguments", "exec_torchrun", "finish", "join", "torchrun_command"]
