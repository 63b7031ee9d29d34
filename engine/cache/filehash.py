"""The file-hash memo: a model file is read and hashed once, later fingerprints cost a ``stat``.

The memo lives under the cache root, one file per host (``filehash/<host>.json``: a
record's device and inode numbers mean something only on the host that took them, and
a lock on a shared file system is not reliable across hosts), and is used through the cache:
:func:`evaldag.engine.run.run` makes its cache's memo the *active* one for the run
(a context variable), and :func:`file_sha256` consults the active memo. Outside a run
(or with ``memo=False``) the file is simply hashed; there is no global default folder.

A memo record is trusted only while the file's ``(device, inode, size, mtime_ns,
ctime_ns)`` all match. A user can set a file's mtime back (``touch -r``) but not its
ctime: replacing the content of a checkpoint in place changes the ctime, so a swapped
file can never match a stale record. ``Cache(..., rehash=True)`` (``--rehash``) ignores
every record and hashes again.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Iterator

from filelock import FileLock

from .files import atomic_write, host_id, inside

INDEX = "filehash"  # the folder of per-host memos
MAX_BYTES = 16 << 20
_active: contextvars.ContextVar["FileHashMemo | None"] = contextvars.ContextVar("evaldag_filehash", default=None)


def _stat_key(st: os.stat_result) -> dict:
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def hash_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class FileHashMemo:
    """``realpath -> {dev, ino, size, mtime_ns, ctime_ns, sha256}`` in ``<root>/filehash/<host>.json``."""

    def __init__(self, root: str | os.PathLike, rehash: bool = False, read_only: bool = False):
        self.root = Path(root)
        self.path = self.root / INDEX / f"{host_id()}.json"
        self.rehash = rehash
        self.read_only = read_only  # a read-only cache: records are read, new ones are not kept
        self.hashed: list[str] = []  # files read and hashed by this memo (tests, statistics)

    def sha256(self, path: str | os.PathLike) -> str:
        real = os.path.realpath(path)
        key = _stat_key(os.stat(real))
        if not self.rehash:
            rec = self._read().get(real)
            if isinstance(rec, dict) and all(rec.get(k) == v for k, v in key.items()) and isinstance(rec.get("sha256"), str):
                return rec["sha256"]
        digest = hash_file(real)
        self.hashed.append(real)
        if _stat_key(os.stat(real)) == key:  # the file did not change while we read it
            self._remember(real, {**key, "sha256": digest})
        return digest

    def knows(self, path: str | os.PathLike, checked: str) -> bool:
        """Whether this memo holds the file as it is now (same stat key) with the mark ``checked``:
        a reader that validated the file once skips it while the bytes cannot have changed."""
        real = os.path.realpath(path)
        rec = self._read().get(real)
        try:
            key = _stat_key(os.stat(real))
        except OSError:
            return False
        return (isinstance(rec, dict) and all(rec.get(k) == v for k, v in key.items())
                and isinstance(rec.get("checked"), list) and checked in rec["checked"])

    def mark(self, path: str | os.PathLike, checked: str) -> None:
        """Record that the file, as hashed now, passed the check ``checked`` (see :meth:`knows`)."""
        self.sha256(path)
        real = os.path.realpath(path)
        rec = self._read().get(real)
        if isinstance(rec, dict) and checked not in rec.get("checked", []):
            self._remember(real, {**rec, "checked": sorted({*rec.get("checked", []), checked})})

    @contextlib.contextmanager
    def active(self) -> Iterator["FileHashMemo"]:
        """Make this memo the one :func:`file_sha256` uses, for the ``with`` block."""
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    def _read(self) -> dict:
        try:
            inside(self.root, self.path)
            if self.path.stat().st_size > MAX_BYTES:
                return {}
            data = json.loads(self.path.read_text())
        except (OSError, ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    def _remember(self, real: str, rec: dict) -> None:
        if self.read_only:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.path) + ".lock", timeout=30):
                index = self._read()
                index[real] = rec
                atomic_write(self.path, json.dumps(index, sort_keys=True).encode(), root=self.root)
        except Exception as e:  # noqa: BLE001 - a memo that cannot be written is not an error
            warnings.warn(f"file-hash memo {self.path} not updated: {e}", stacklevel=3)


def active_memo() -> "FileHashMemo | None":
    """The running cache's memo (inside :meth:`FileHashMemo.active`), else None."""
    return _active.get()


def file_sha256(path: str | os.PathLike, memo: "FileHashMemo | bool | None" = None) -> str:
    """sha256 of a file, through ``memo``, else the active memo of the running cache, else read.

    ``memo=False`` always reads the file.
    """
    if memo is None:
        memo = _active.get()
    if isinstance(memo, FileHashMemo):
        return memo.sha256(path)
    return hash_file(os.path.realpath(path))
