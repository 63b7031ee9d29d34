"""Which shard of which sweep is running where: the records ``--shard I/N`` leaves in the cache.

A job array starts N copies of one sweep command, each with its own ``--shard I/N``, on one
shared cache. A slip in the array script (``$SLURM_ARRAY_TASK_ID`` read twice the same way,
a resubmitted task still running) gives two jobs one index: nothing goes wrong in the cache
(its writes are atomic and content-addressed) but the work is done twice and another share
is never done. The cache is the one place every job sees, so each shard leaves a record
there while it runs::

    shards/<sweep id>/<I>-of-<N>-<host>-<pid>.json   {"index", "of", "host", "pid", "since"}

and a shard starting reads the records of its sweep (the same checkpoint list, benchmarks
and N) and warns about any other process holding its index. A record whose process is gone
from this host is deleted; one of another host is reported with its start time (a job
killed there leaves its record until the next run of that shard on that host). Records are
one atomic file each: no lock, nothing that a shared file system could get half right.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from .files import atomic_write, host_id, inside
from .locks import _process_state

FOLDER = "shards"


def sweep_id(models: list, benchmarks: list[str], of: int) -> str:
    """The same for every shard of one sweep: its checkpoints in order, its benchmarks and N."""
    text = json.dumps([list(map(str, models)), sorted(benchmarks), of], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class ShardRecord:
    """This process's record as shard ``index`` of ``of`` of sweep ``sweep`` under the cache ``root``."""

    def __init__(self, root: str | os.PathLike, sweep: str, index: int, of: int):
        self.root, self.index, self.of = Path(root), index, of
        self.dir = self.root / FOLDER / sweep
        self.path = self.dir / f"{index}-of-{of}-{host_id()}-{os.getpid()}.json"

    def others(self) -> list[str]:
        """One sentence per other process that holds this index (records of dead local processes are removed)."""
        out = []
        try:
            found = sorted(self.dir.glob(f"{self.index}-of-{self.of}-*.json"))
        except OSError:
            return out
        for p in found:
            if p == self.path or p.is_symlink():
                continue
            try:
                inside(self.root, p)
                rec = json.loads(p.read_bytes()[:4096])
                host, pid, since = str(rec["host"]), int(rec["pid"]), float(rec["since"])
            except (OSError, ValueError, TypeError, KeyError):
                continue
            if host == host_id() and _process_state(pid) is None:  # killed here: its record is stale
                p.unlink(missing_ok=True)
                continue
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
            local = "" if host != host_id() else " (still running on this host)"
            out.append(f"pid {pid} on {host} since {when}{local}")
        return out

    def enter(self, read_only: bool = False) -> list[str]:
        """Write this process's record (not in a read-only cache); returns :meth:`others`."""
        clash = self.others()
        if not read_only:
            data = {"index": self.index, "of": self.of, "host": host_id(), "pid": os.getpid(), "since": time.time()}
            try:
                atomic_write(self.path, json.dumps(data).encode(), root=self.root)
            except OSError:  # a record is a courtesy: a cache that cannot take it still runs
                pass
        return clash

    def leave(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass
        try:
            self.dir.rmdir()  # the last shard out removes the sweep's folder
        except OSError:
            pass
