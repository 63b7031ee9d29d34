"""The node store: one content-addressed, checksummed, atomically written file per node.

Layout under the cache root::

    objects/<fp[:2]>/<fp>.safetensors   a node's value: arrays + JSON skeleton + metadata
    locks/<fp[:2]>/<fp>.lock            held while a process computes that node

Every entry is one safetensors file written to a temp file and renamed into place, so
a reader sees a whole entry or none. Its ``__metadata__`` carries a sha256 over the
skeleton, the metadata and every array; a mismatch or a truncated file is reported,
the entry discarded and the node recomputed. Nothing is ever unpickled.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from filelock import FileLock, Timeout

from .codec import CorruptEntry, CorruptEntryWarning, pack, unpack
from .files import atomic_write
from .safety import ReadOnlyCache


@dataclass
class Entry:
    fingerprint: str
    value: Any
    meta: dict


class NoLock:
    """The lock of a read-only store: taken at once, guards nothing (nothing is written)."""

    def acquire(self, *args: Any, **kw: Any) -> "NoLock":
        return self

    def release(self) -> None:
        pass

    def __enter__(self) -> "NoLock":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


class NodeStore:
    """Content-addressed node store under ``root`` (created on first write)."""

    def __init__(self, root: str | os.PathLike, *, read_only: bool = False, under: "NodeStore | None" = None):
        self.root = Path(root)
        self.read_only = read_only  # no writes, no lock files: a shared cache on a read-only mount
        self.under = under  # a read-only store read where this one has no entry (--cache-read-from)
        self.corrupt: list[str] = []  # fingerprints found corrupt during this process

    # ------------------------------------------------------------------ paths
    def path(self, fp: str) -> Path:
        return self.root / "objects" / fp[:2] / f"{fp}.safetensors"

    def lock(self, fp: str) -> "FileLock | NoLock":
        if self.read_only:  # nothing is written, so nothing to guard; and no lock file can be made
            return NoLock()
        p = self.root / "locks" / fp[:2] / f"{fp}.lock"
        p.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(p))

    def try_lock(self, fp: str) -> "FileLock | NoLock | None":
        """Take the node's lock without waiting; None if another process holds it."""
        lk = self.lock(fp)
        try:
            lk.acquire(timeout=0)
        except Timeout:
            return None
        return lk

    # ------------------------------------------------------------------ entries
    def has(self, fp: str) -> bool:
        return self.path(fp).exists() or (self.under is not None and self.under.has(fp))

    def get(self, fp: str) -> Entry | None:
        """The entry, or None if absent. A corrupt entry is warned about and deleted."""
        p = self.path(fp)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            return self.under.get(fp) if self.under is not None else None
        try:
            value, meta = unpack(data, where=str(p))
        except CorruptEntry as e:
            warnings.warn(f"corrupt cache entry discarded, will recompute: {e}", CorruptEntryWarning, stacklevel=2)
            self.corrupt.append(fp)
            try:
                p.unlink()
            except OSError:  # gone already, or a read-only cache: left in place
                pass
            return None
        return Entry(fp, value, meta)

    def put(self, fp: str, value: Any, meta: dict) -> None:
        if self.read_only:
            raise ReadOnlyCache(f"the cache {self.root} is read-only: cannot store {meta.get('node', fp[:12])}")
        meta = {**meta, "fingerprint": fp, "written_at": time.time()}
        atomic_write(self.path(fp), pack(value, meta))

    def touch(self, fp: str) -> None:
        try:
            os.utime(self.path(fp))
        except OSError:  # gone, or a read-only cache
            pass

    # ------------------------------------------------------------------ maintenance
    def entries(self) -> Iterator[Path]:
        """The node files; a symbolic link (file or folder) is not an entry, so prune never follows one."""
        objects = self.root / "objects"
        if objects.exists() and not objects.is_symlink():
            yield from sorted(p for p in objects.glob("*/*.safetensors") if not p.is_symlink() and not p.parent.is_symlink())

    def verify(self) -> list[str]:
        """Check every entry's checksum; returns the paths that failed (left in place)."""
        bad = []
        for p in self.entries():
            try:
                unpack(p.read_bytes(), where=str(p))
            except CorruptEntry:
                bad.append(str(p))
        return bad

    def find(self, prefix: str) -> list[str]:
        return [p.stem for p in self.entries() if p.stem.startswith(prefix)]

    def prune(self, cutoff: float) -> int:
        """Delete entries not read or written since ``cutoff`` (a time.time() value)."""
        n = 0
        for p in self.entries():
            st = p.stat()
            if max(st.st_mtime, st.st_atime) < cutoff:
                p.unlink()
                n += 1
        return n
