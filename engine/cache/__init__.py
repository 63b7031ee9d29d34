"""The cache: one folder, one object. ``Cache(root)`` owns everything stored under it.

::

    <root>/objects/<ab>/<fp>.safetensors   node values          cache.nodes    (nodes.py)
    <root>/locks/                          per-node file locks  cache.nodes
    <root>/requests.sqlite                 model request results cache.requests (requests.py)
    <root>/history/                        last components per node slot  cache.history (history.py)
    <root>/filehash.json                   model-file hash memo cache.filehash (filehash.py)
    <root>/evaldag-cache.json              the marker: clear/prune touch only marked roots (safety.py)

A root this process cannot write is read-only (``cache.read_only``): it is read, never
locked or written; ``Cache(rw, read_from=ro)`` reads ``ro`` where ``rw`` has no entry.

The codec (codec.py) is the one pickle-free format of node values and request results;
files.py holds the rules every file obeys (atomic writes, no links followed, temporaries
swept); deep.py the ``verify --deep`` recomputation.
``run()``, the CLI and the demo build a ``Cache`` the same way: ``Cache(dir)`` (``None``:
``$EVALDAG_CACHE_DIR`` or the user cache dir), and ``run(..., cache=...)`` builds the
executor on ``cache.requests`` itself.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .codec import CorruptEntry, CorruptEntryWarning, EncodeError
from .filehash import FileHashMemo, file_sha256
from .files import CacheWriteError, LinkWarning, atomic_write, default_cache_dir, sweep_temps
from .history import History
from .nodes import Entry, NodeStore
from .requests import DamagedDatabaseWarning, RequestStore
from .safety import MARKER, NotACache, ReadOnlyCache, clear_entries, require_marker, writable, write_marker

__all__ = [
    "MARKER", "Cache", "CacheWriteError", "CorruptEntry", "CorruptEntryWarning", "DamagedDatabaseWarning",
    "EncodeError", "Entry", "FileHashMemo", "History", "LinkWarning", "NodeStore", "NotACache", "ReadOnlyCache",
    "RequestStore", "atomic_write", "default_cache_dir", "file_sha256",
]


class Cache:
    """Every store under one root. ``rehash=True`` ignores the file-hash memo (``--rehash``)."""

    def __init__(self, root: str | os.PathLike | None = None, *, rehash: bool = False,
                 read_from: str | os.PathLike | None = None):
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        # a cache this process cannot write (a team's shared cache on a read-only mount) is read-only:
        # no lock files, no history, nothing stored; a run that needs new work is refused up front
        self.read_only = not writable(self.root)
        # read_from: a read-only cache under this one; entries are read from it, new ones go here
        self.read_from = Path(read_from).expanduser() if read_from is not None else None
        ro, under = self.read_only, self.read_from
        self.nodes = NodeStore(self.root, read_only=ro, under=NodeStore(under, read_only=True) if under else None)
        self.requests = RequestStore(self.root, read_only=ro, under=RequestStore(under, read_only=True) if under else None)
        self.history = History(self.root, read_only=ro)
        self.filehash = FileHashMemo(self.root, rehash=rehash, read_only=ro)

    @classmethod
    def open(cls, cache: "Cache | str | os.PathLike | None" = None, **kw) -> "Cache":
        """A Cache as given, or one built from a folder (None: the default folder)."""
        return cache if isinstance(cache, Cache) else cls(cache, **kw)

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    def sweep(self) -> int:
        """Remove temporaries a killed writer left (older than a write can take); run() calls it."""
        return 0 if self.read_only else sweep_temps(self.root)

    def info(self) -> dict:
        """Counts and sizes; reads only (a damaged request database is named, not repaired)."""
        files = list(self.nodes.entries())
        req = self.requests.path
        rows, problem = self.requests.peek_count()
        out = {
            "root": str(self.root),
            "nodes": len(files),
            "node_bytes": sum(f.stat().st_size for f in files),
            "requests": rows,
            "request_bytes": req.stat().st_size if req.exists() else 0,
        }
        if problem:
            out["requests_problem"] = f"{problem}; `evaldag cache verify --repair` moves it aside, a run rebuilds it"
        return out

    def verify(self) -> list[str]:
        """``"path: why"`` for each node entry that fails its checks, and for a damaged request database."""
        return self.nodes.verify() + self.requests.check()

    def repair(self) -> list[str]:
        """Delete failing node entries; move a damaged request database aside (rebuilt empty)."""
        done = []
        for fp in [p.stem for p in self.nodes.entries()]:
            if self.nodes.get(fp) is None:
                done.append(f"removed {self.nodes.path(fp)}")
        bad = self.requests.check()
        if bad:
            done.append(f"moved {self.requests.path} to {self.requests.recover(bad[0])}")
        return done

    def mark(self) -> None:
        """Write the root marker (``run()`` does, before it stores anything)."""
        if not self.read_only:
            write_marker(self.root)

    def check_writable(self, missing: list[str]) -> None:
        """A read-only cache refuses a run that would have to store ``missing`` nodes, naming them."""
        if self.read_only and missing:
            shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
            raise ReadOnlyCache(f"the cache {self.root} is read-only and {len(missing)} nodes are not in it ({shown}); "
                                f"they would be written to {self.root / 'objects'}: give a writable --cache-dir and "
                                f"--cache-read-from {self.root}")

    def prune(self, older_than_seconds: float) -> int:
        """Delete entries and request results not used for ``older_than_seconds``, and old temporaries (a marked root only)."""
        require_marker(self.root)
        cutoff = time.time() - older_than_seconds
        self.sweep()
        n = self.nodes.prune(cutoff)
        if self.requests.path.exists():
            n += self.requests.prune(cutoff)
        return n

    def clear(self) -> tuple[int, list[Path]]:
        """Remove every entry the cache wrote; a root without the marker raises :class:`NotACache`.

        Returns (files removed, paths left: whatever else the folder held, untouched). Links
        are never followed (safety.py).
        """
        self.requests.close()
        return clear_entries(self.root)
