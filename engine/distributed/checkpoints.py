"""Checkpoint-parallel sweeps (``--parallel checkpoints``): whole checkpoints per rank.

Sharding requests (``--parallel requests``, :mod:`.sharded`) makes every rank load every
checkpoint to forward its share of the batches: K checkpoints on W ranks cost K x W loads.
With at least as many checkpoints as ranks it is cheaper to give each rank whole
checkpoints, so each is loaded once, on one device. What all checkpoints share (the retain
and reference models' work, which does not read the swept ``model``) is computed first, once,
by all ranks together (:func:`shared_graph`), so no rank repeats it and none waits on
another's lock for it.

Everything here is decided from the command line and the files alone, identically on every
rank, with no collective: which mode (:func:`choose_mode`) and which rank runs which
checkpoint (:func:`assign`: largest expected work first, each to the least loaded rank).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ..graph import Graph
from ..resources import ResourceSet
from .group import partition

MODES = ("auto", "checkpoints", "requests")


def choose_mode(requested: str, checkpoints: int, world: int, cache_reads: str = "all") -> tuple[str, str]:
    """(mode, why). ``auto``: whole checkpoints per rank when there are at least as many
    checkpoints as ranks, else today's request sharding (fewer checkpoints than ranks would
    leave ranks idle). With ``EVALDAG_DIST_CACHE_READS=rank0`` (a cache only rank 0 may
    touch) every rank cannot write its own checkpoints, so only ``requests`` works."""
    if requested not in MODES:
        raise ValueError(f"--parallel {requested}: choose one of {', '.join(MODES)}")
    if requested == "checkpoints" and cache_reads == "rank0":
        raise ValueError("--parallel checkpoints: every rank writes its own checkpoints to the cache, but "
                         "EVALDAG_DIST_CACHE_READS=rank0 says only rank 0 may use it; use --parallel requests")
    if requested != "auto":
        return requested, f"--parallel {requested}"
    if cache_reads == "rank0":
        return "requests", "auto: EVALDAG_DIST_CACHE_READS=rank0 (only rank 0 uses the cache)"
    if checkpoints >= world:
        return "checkpoints", f"auto: {checkpoints} checkpoints >= {world} ranks"
    return "requests", f"auto: {checkpoints} checkpoints < {world} ranks"


def _weight_bytes(folder: Path) -> int:
    try:
        return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    except OSError:
        return 0


def expected_work(spec: str) -> int:
    """A checkpoint's expected work: every checkpoint of a sweep runs the same requests, so
    their tokens are equal and the work per token follows the parameter count, i.e. the
    bytes of its weights (an adapter's: its base's plus its own). Hub ids and servers count 0."""
    folder = Path(spec).expanduser()
    if not folder.is_dir():
        return 0
    total = _weight_bytes(folder)
    if (folder / "adapter_config.json").is_file():
        try:
            base = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
        except (OSError, ValueError):
            base = None
        if isinstance(base, str) and Path(base).expanduser().is_dir():
            total += _weight_bytes(Path(base).expanduser())
    return total


def assign(models: list[str], world: int) -> list[list[str]]:
    """Each rank's checkpoints, largest expected work first, each to the least loaded rank;
    a rank runs its own in that order. Ties keep the command line's order."""
    owners = partition([expected_work(m) for m in models], world)
    return [[m for m, r in sorted(zip(models, owners), key=lambda x: (-expected_work(x[0]), models.index(x[0])))
             if r == rank] for rank in range(world)]


def _reads(resource: Any, swept: Any) -> bool:
    """Whether ``resource`` is the swept model or is derived from it (a provider's inputs)."""
    if resource is swept:
        return True
    return any(_reads(r, swept) for r in getattr(resource, "inputs", {}).values())


def shared_graph(graph: Graph, resources: Any, swept: str = "model") -> Graph | None:
    """The part of ``graph`` that reads nothing of the swept resource, neither itself nor
    through a parent (the retain and reference models' work); None when there is none.

    The vertices keep their keys, bindings and parents, so their fingerprints are the ones
    of the full graph: what this part stores is what every checkpoint's run then finds.
    """
    rs = resources if isinstance(resources, ResourceSet) else ResourceSet(resources)
    if not rs.has(swept):
        return None
    model = rs.get(swept)
    shared: dict[str, bool] = {}
    for v in graph.order():
        own = all(not _reads(rs.get(name, v.label), model) for name in v.resources.values())
        shared[v.key] = own and all(shared[p] for p in v.parent_keys.values())
    keep = [k for k, ok in shared.items() if ok]
    if not keep or len(keep) == len(graph.vertices):
        return None
    part = copy.copy(graph)
    part.vertices = {k: graph.vertices[k] for k in keep}
    part.nx = graph.nx.subgraph(keep).copy()
    part.roots = [k for k in keep if not any(c in part.vertices for c in graph.nx.successors(k))]
    part._names = {n: k for n, k in graph._names.items() if k in part.vertices}
    return part
