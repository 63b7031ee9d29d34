"""The node store: one content-addressed, checksummed, atomically written file per node.

Layout under the cache root::

    objects/<fp[:2]>/<fp>.safetensors   a node's value: arrays + JSON skeleton + metadata
    locks/<fp[:2]>/<fp>.lock            held while a process computes that node

Every entry is one safetensors file written to a temp file and renamed into place, so
a reader sees a whole entry or none. Its ``__metadata__`` carries a sha256 over the
skeleton, the metadata and every array. On every read the entry must also be what its
name says: the fingerprint recorded inside equals the one asked for (an entry copied to
another node's path is refused), the metric name equals the asking node's, and the
value's type equals the recorded one. Any mismatch, a bad checksum or a truncated file
is reported, the entry discarded and the node recomputed. Nothing is ever unpickled.
Links below the root are never followed (see files.py).

Two kinds of entry are never judged, deleted or overwritten, only skipped and counted in
``left`` (a run recomputes the node without storing it): one in a newer format (a newer
evaldag sharing the cache wrote it) and one this user cannot read (another user's cache
under umask 077). A read-only store (``Cache(..., inspect=True)``, what ``cache ls``,
``info``, ``explain`` and ``verify`` open) never deletes anything, corrupt entries included.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from filelock import Timeout

from .codec import MAX_HEADER_BYTES, CorruptEntry, CorruptEntryWarning, NewerFormat, leave_reason, pack, unpack
from .files import LinkRefused, atomic_write, inside, is_temp, refuse, walk_files
from .locks import NodeLock, wait
from .safety import ReadOnlyCache

MAX_ENTRY_BYTES = 8 << 30  # larger than any node value; a bigger file is not ours


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


def check_entry(fp: str, value: Any, meta: dict, where: str, metric: str | None = None) -> None:
    """Raise :class:`CorruptEntry` unless the entry is what ``fp`` (and ``metric``) name."""
    if meta.get("fingerprint") != fp:
        raise CorruptEntry(f"{where}: holds fingerprint {str(meta.get('fingerprint'))[:16]}…, not {fp[:16]}… (misplaced)")
    if metric is not None and meta.get("metric") not in (None, metric):
        raise CorruptEntry(f"{where}: holds metric {meta.get('metric')!r}, not {metric!r}")
    vt = meta.get("value_type")
    if vt is not None and type(value).__name__ != vt:
        raise CorruptEntry(f"{where}: value is a {type(value).__name__}, recorded as {vt}")


def read_checked(p: Path) -> bytes:
    """The file's bytes, after checking its size and header length claim (nothing hostile is allocated)."""
    with open(p, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_ENTRY_BYTES:
            raise CorruptEntry(f"{p}: {size} bytes, larger than any entry")
        head = f.read(8)
        claimed = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < claimed <= min(MAX_HEADER_BYTES, size - 8):
            raise CorruptEntry(f"{p}: unreadable (header length {claimed} does not fit the {size}-byte file)")
        return head + f.read()


class NodeStore:
    """Content-addressed node store under ``root`` (created on first write)."""

    def __init__(self, root: str | os.PathLike, *, read_only: bool = False, under: "NodeStore | None" = None):
        self.root = Path(root)
        self.read_only = read_only  # no writes, no lock files: a shared cache on a read-only mount
        self.stored = 0  # entries this process wrote (an interrupted run says how many it kept)
        self.under = under  # a read-only store read where this one has no entry (--cache-read-from)
        self.corrupt: list[str] = []  # fingerprints found corrupt during this process
        self.left: dict[str, str] = {}  # fingerprint -> why its entry was left alone (newer format, unreadable)
        self.unlisted: list[Path] = []  # folders under objects/ this user cannot list (last entries() walk)

    # ------------------------------------------------------------------ paths
    def path(self, fp: str) -> Path:
        return self.root / "objects" / fp[:2] / f"{fp}.safetensors"

    def lock(self, fp: str) -> "NodeLock | NoLock":
        if self.read_only:  # nothing is written, so nothing to guard; and no lock file can be made
            return NoLock()
        p = self.root / "locks" / fp[:2] / f"{fp}.lock"
        inside(self.root, p)
        p.parent.mkdir(parents=True, exist_ok=True)
        inside(self.root, p)
        return NodeLock(p, self.root)

    def wait_lock(self, fp: str, what: str, timeout: float | None = None) -> "NodeLock | NoLock":
        """The node's lock, waited for: says who holds it after a few seconds, gives up after ``timeout`` (locks.py)."""
        return wait(self.lock(fp), what, timeout)

    def try_lock(self, fp: str, doing: str = "") -> "NodeLock | NoLock | None":
        """Take the node's lock without waiting; None if another process holds it. ``doing`` (the
        node and its model) goes into the holder record, for a waiter to be told."""
        lk = self.lock(fp)
        if doing and isinstance(lk, NodeLock):
            lk.doing = doing
        try:
            lk.acquire(timeout=0)
        except Timeout:
            return None
        return lk

    # ------------------------------------------------------------------ entries
    def has(self, fp: str) -> bool:
        return self.path(fp).exists() or (self.under is not None and self.under.has(fp))

    def read(self, fp: str, metric: str | None = None) -> Entry:
        """The entry; :class:`CorruptEntry` if it fails any check, FileNotFoundError if absent."""
        p = self.path(fp)
        inside(self.root, p)
        value, meta = unpack(read_checked(p), where=str(p))
        check_entry(fp, value, meta, str(p), metric)
        return Entry(fp, value, meta)

    def get(self, fp: str, metric: str | None = None) -> Entry | None:
        """The entry, or None if absent. A corrupt or misplaced entry is warned about and deleted."""
        try:
            return self.read(fp, metric)
        except FileNotFoundError:
            return self.under.get(fp, metric) if self.under is not None else None
        except LinkRefused as e:
            refuse(e, f"reading node {fp[:16]}")
            return None
        except NewerFormat as e:
            self.left[fp] = str(e)
            return None
        except OSError as e:  # permission denied (another user's umask 077), EIO: never judged, never deleted
            self.left[fp] = f"{self.path(fp)}: unreadable ({e.strerror or e})"
            return None
        except CorruptEntry as e:
            self.corrupt.append(fp)
            if self.read_only:  # inspecting (cache explain) or a read-only cache: reported, left in place
                warnings.warn(f"corrupt cache entry (left in place, the cache is opened read-only): {e}",
                              CorruptEntryWarning, stacklevel=2)
                return None
            warnings.warn(f"corrupt cache entry discarded, will recompute: {e}", CorruptEntryWarning, stacklevel=2)
            try:
                self.path(fp).unlink()
            except OSError:  # gone already
                pass
            return None

    def put(self, fp: str, value: Any, meta: dict) -> None:
        if fp in self.left:  # a newer evaldag's entry, or one we cannot read: not ours to overwrite
            return
        if self.read_only:
            raise ReadOnlyCache(f"the cache {self.root} is read-only: cannot store {meta.get('node', fp[:12])}")
        meta = {**meta, "fingerprint": fp, "value_type": type(value).__name__, "written_at": time.time()}
        try:
            atomic_write(self.path(fp), pack(value, meta), root=self.root)
        except LinkRefused as e:
            refuse(e, f"writing node {fp[:16]}")
        self.stored += 1  # what an interrupted run says it kept

    def discard(self, fp: str) -> None:
        """Remove one entry (a node computed from a model that changed under the run)."""
        try:
            os.unlink(inside(self.root, self.path(fp)))
        except (OSError, LinkRefused):  # gone, a link, or a read-only cache
            pass

    def touch(self, fp: str) -> None:
        try:
            os.utime(inside(self.root, self.path(fp)), follow_symlinks=False)
        except (OSError, LinkRefused):  # gone, a link, or a read-only cache
            pass

    # ------------------------------------------------------------------ maintenance
    def entries(self) -> Iterator[Path]:
        """Entry files: never temporaries, never a symbolic link (file or folder), so prune never follows one."""
        self.unlisted = []
        for p in walk_files(self.root, self.root / "objects", self.unlisted):
            if p.suffix == ".safetensors" and not is_temp(p) and p.parent.parent == self.root / "objects":
                yield p

    def survey(self) -> Iterator[tuple[Path, str, "Entry | str"]]:
        """Each entry read and judged, nothing changed: ``(path, state, entry or why)``; state is
        ``ok``, ``corrupt``, ``newer`` (a newer evaldag's format) or ``unreadable``."""
        for p in self.entries():
            try:
                yield p, "ok", self.read(p.stem)
            except NewerFormat as e:
                yield p, "newer", str(e)
            except CorruptEntry as e:
                yield p, "corrupt", str(e) if str(p) in str(e) else f"{p}: {e}"
            except OSError as e:
                yield p, "unreadable", f"{p}: {e.strerror or e}"

    def verify(self) -> list[str]:
        """Check every entry (checksum, name, type); ``"path: why"`` for each corrupt one (left in place).
        Newer-format and unreadable entries are not corrupt: they land in ``left``."""
        bad = []
        for p, state, got in self.survey():
            if state == "corrupt":
                bad.append(str(got))
            elif state != "ok":
                self.left[p.stem] = str(got)
        return bad

    def find(self, prefix: str) -> list[str]:
        return [p.stem for p in self.entries() if p.stem.startswith(prefix)]

    def prune(self, cutoff: float) -> int:
        """Delete entries not read or written since ``cutoff`` (a time.time() value)."""
        n = 0
        for p in self.entries():
            st = p.lstat()
            if max(st.st_mtime, st.st_atime) < cutoff:
                why = leave_reason(p)
                if why is not None:
                    self.left[p.stem] = f"{p}: {why}"
                    continue
                p.unlink()
                n += 1
        return n
