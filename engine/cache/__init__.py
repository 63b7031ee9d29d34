"""The cache: one folder, one object. ``Cache(root)`` owns everything stored under it.

::

    <root>/objects/<ab>/<fp>.safetensors   node values          cache.nodes    (nodes.py)
    <root>/locks/                          per-node file locks and holder records  cache.nodes (locks.py)
    <root>/requests/<model>/<sha>.batch    model request results, one file per batch  cache.requests (requests.py, batches.py)
    <root>/index/requests-<host>.sqlite    each host's index of those files (rebuilt from them)  cache.requests
    <root>/history/                        last components per node slot  cache.history (history.py)
    <root>/filehash/<host>.json            model-file hash memo, per host cache.filehash (filehash.py)
    <root>/shards/                         which shard of which sweep runs where  (shards.py)
    <root>/weights/<ab>/<key>/             trained weights of a derived model (a relearn)  cache.weights (weights.py)
    <root>/evaldag-cache.json              the marker: clear/prune touch only marked roots (safety.py)

A root this process cannot write is read-only (``cache.read_only``): it is read, never
locked or written; ``Cache(rw, read_from=ro)`` reads ``ro`` where ``rw`` has no entry.
``Cache(root, inspect=True)`` is read-only too, whatever the permissions: what ``cache
ls``, ``info``, ``explain`` and ``verify`` open, so looking never changes anything. A run
adopts a root only if it is marked, new or empty (``claim``; safety.py).

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

from .codec import CorruptEntry, CorruptEntryWarning, EncodeError, NewerFormat, leave_reason
from .filehash import FileHashMemo, file_sha256
from .files import TMP_MAX_AGE_S, CacheWriteError, LinkWarning, atomic_write, default_cache_dir, sweep_temps
from .history import History
from .locks import LockTimeout
from .nodes import Entry, NodeStore
from .requests import DamagedDatabaseWarning, RequestStore
from .weights import CorruptWeights, WeightStore
from .safety import MARKER, NotACache, ReadOnlyCache, cache_root, claim_root, clear_entries, require_marker, writable

__all__ = [
    "MARKER", "Cache", "CacheWriteError", "CorruptEntry", "CorruptEntryWarning", "DamagedDatabaseWarning",
    "CorruptWeights", "EncodeError", "Entry", "FileHashMemo", "History", "LeftAloneWarning", "LinkWarning", "LockTimeout", "NewerFormat",
    "NodeStore", "NotACache", "ReadOnlyCache", "RequestStore", "WeightStore", "atomic_write", "default_cache_dir", "file_sha256",
]


class LeftAloneWarning(UserWarning):
    """Entries a run skipped and did not overwrite: a newer evaldag's format, or unreadable to this user."""


class Cache:
    """Every store under one root. ``rehash=True`` ignores the file-hash memo (``--rehash``)."""

    def __init__(self, root: str | os.PathLike | None = None, *, rehash: bool = False,
                 read_from: str | os.PathLike | None = None, inspect: bool = False):
        self.root = cache_root(root)  # an empty path is refused, never taken as the working directory
        # a cache this process cannot write (a team's shared cache on a read-only mount) is read-only:
        # no lock files, no history, nothing stored; a run that needs new work is refused up front.
        # inspect: opened to look at (cache ls/info/explain/verify), so nothing is ever changed
        self.read_only = inspect or not writable(self.root)
        # read_from: a read-only cache under this one; entries are read from it, new ones go here
        self.read_from = cache_root(read_from) if read_from is not None else None
        ro, under = self.read_only, self.read_from
        self.nodes = NodeStore(self.root, read_only=ro, under=NodeStore(under, read_only=True) if under else None)
        self.requests = RequestStore(self.root, read_only=ro, under=RequestStore(under, read_only=True) if under else None)
        self.history = History(self.root, read_only=ro)
        self.filehash = FileHashMemo(self.root, rehash=rehash, read_only=ro)
        self.weights = WeightStore(self.root, read_only=ro, under=WeightStore(under, read_only=True) if under else None)

    @classmethod
    def open(cls, cache: "Cache | str | os.PathLike | None" = None, **kw) -> "Cache":
        """A Cache as given, or one built from a folder (None: the default folder)."""
        return cache if isinstance(cache, Cache) else cls(cache, **kw)

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    def sweep(self) -> int:
        """Remove temporaries a killed writer left (older than a write can take); run() calls it."""
        if self.read_only:
            return 0
        return sweep_temps(self.root) + self.weights.sweep(TMP_MAX_AGE_S)

    def info(self) -> dict:
        """Counts and sizes; reads only headers (a damaged request database is named, not repaired;
        entries in a newer format or unreadable to this user are counted apart)."""
        files = list(self.nodes.entries())
        rows, problem = self.requests.peek_count()
        kept = [why for why in map(leave_reason, files) if why is not None]
        out = {
            "root": str(self.root),
            "nodes": len(files),
            "node_bytes": sum(f.lstat().st_size for f in files),
            "requests": rows,
            "request_bytes": self.requests.nbytes(),
        }
        stored = list(self.weights.entries())
        if stored:  # trained weights of derived models (a relearn): folders, not node entries
            out["weights"] = len(stored)
            out["weight_bytes"] = sum(self.weights.nbytes(d) for d in stored)
        if kept:
            out["nodes_newer_format"] = sum(w.startswith("newer") for w in kept)
            out["nodes_unreadable"] = sum(w.startswith("unreadable") for w in kept)
        if self.nodes.unlisted:
            out["unreadable_folders"] = [str(p) for p in self.nodes.unlisted]
        if problem and self.requests.unreadable():
            out["requests_problem"] = f"{self.requests.path}: unreadable ({self.requests.unreadable()}); left alone"
        elif problem:
            out["requests_problem"] = f"{problem}`evaldag cache verify --repair` removes them, a run recomputes them"
        return out

    def verify(self) -> list[str]:
        """``"path: why"`` for each node entry and stored weights folder that fails its checks, and for a
        damaged request database."""
        return self.nodes.verify() + self.requests.check() + self.weights.verify()

    def repair(self) -> list[str]:
        """Delete corrupt node entries (never a newer evldag's or an unreadable one) and damaged request
        batch files (their answers are recomputed)."""
        require_marker(self.root)
        done = []
        for p, state, _ in list(self.nodes.survey()):
            if state == "corrupt":
                p.unlink(missing_ok=True)
                done.append(f"removed {p}")
        bad = self.weights.verify()  # a damaged weights folder: the derived model is trained again
        for folder in list(self.weights.entries()):
            if any(b.startswith(str(folder)) for b in bad):
                self.weights.remove(folder)
                done.append(f"removed {folder}")
        return done + self.requests.repair()

    def claim(self, init: bool = False) -> None:
        """Before a run uses the cache: refuse a non-empty folder without the marker unless ``init``
        (``--init-cache``), and mark the root (``run()`` does, before it sweeps or stores anything)."""
        claim_root(self.root, init=init, read_only=self.read_only)
        if self.read_from is not None:
            claim_root(self.read_from, init=init, read_only=True, what="--cache-read-from")

    def left_alone(self) -> str | None:
        """One sentence on entries a run skipped and did not overwrite, or None."""
        store = getattr(self.nodes, "store", self.nodes)  # a distributed rank's view wraps the node store
        why = list(getattr(store, "left", {}).values())
        if not why:
            return None
        newer = sum("newer than this evaldag" in w or "newer format" in w for w in why)
        parts = ([f"{newer} in a newer format (a newer evaldag wrote them)"] if newer else []) + \
                ([f"{len(why) - newer} unreadable to this user"] if len(why) > newer else [])
        return (f"{len(why)} cache entries left alone ({', '.join(parts)}): their nodes were recomputed and not "
                f"stored; first: {why[0]}")

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
        n += self.requests.prune(cutoff)
        n += self.weights.prune(cutoff)
        return n

    def close(self) -> None:
        """Let go of the request index's database (its write-ahead log is checkpointed and removed):
        a run started from Python leaves the folder as a finished command-line run does. Reopened
        on the next use."""
        for store in (self.requests, getattr(self.requests, "under", None)):
            if hasattr(store, "close"):  # a torchrun rank other than 0 holds a read-only view with nothing open
                store.close()

    def clear(self) -> tuple[int, list[Path]]:
        """Remove every entry the cache wrote; a root without the marker raises :class:`NotACache`.

        Returns (files removed, paths left: whatever else the folder held, untouched). Links
        are never followed (safety.py).
        """
        self.requests.close()
        kept: list[str] = []
        removed, left = clear_entries(self.root, kept)
        self.kept = kept
        return removed, left
