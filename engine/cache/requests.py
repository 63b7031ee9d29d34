"""The request store: results of model work keyed by (model key, request key).

One SQLite file (WAL mode) beside the node store. The model key is the model's
fingerprint plus the device type it runs on (and ``det`` under ``--deterministic``), so
a CPU fp32 answer is never served to a CUDA bf16 run. Each row holds one request's
result packed exactly like a node entry (safetensors bytes with a checksummed JSON
skeleton) plus the device, dtype and batch it was computed in; a bad row is a miss,
never unpickled. The executor writes a whole batch in one transaction the moment the
batch finishes: a killed run keeps every finished batch.

A damaged database (SQLite's ``quick_check`` at open, or any database error later) is
moved aside as ``requests.sqlite.damaged-<time>`` with a warning naming it, and an empty
one is built; the run recomputes what it needs. A full disk is a
:class:`~.files.CacheWriteError`, one line. A database file (or its ``-wal``/``-shm``)
that is a symlink is refused: the run goes on without the request store. A read-only
store (a shared cache on a read-only mount) is opened immutable and never written;
``under`` is a read-only store read for keys this one lacks (``--cache-read-from``).
A database this user cannot open (another user's cache under umask 077) is neither
damaged nor ours: it is not used, never moved, and reported as unreadable. A row in a
newer evaldag's format is a miss, never deleted.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Iterable

import numpy as np

from ..requests import REQUEST_TYPES, RESULT_TYPES, result_type
from .codec import CorruptEntry, CorruptEntryWarning, NewerFormat, pack, unpack
from .files import CacheWriteError, LinkRefused, LinkWarning, inside
from .safety import ReadOnlyCache

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    model TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    written REAL NOT NULL,
    PRIMARY KEY (model, key)
)
"""
SIDE_FILES = ("-wal", "-shm", "-journal")


class DamagedDatabaseWarning(UserWarning):
    """The request database was damaged; it was moved aside and rebuilt empty."""


def _full(e: BaseException) -> bool:
    return isinstance(e, sqlite3.OperationalError) and "full" in str(e).lower()


class RequestStore:
    """Per-model results of requests. Safe to share between processes on one machine."""

    def __init__(self, root: str | Path, *, read_only: bool = False, under: "RequestStore | None" = None):
        self.root = Path(root)
        self.path = self.root / "requests.sqlite"
        self.read_only = read_only  # opened immutable: no journal, no lock, no write
        self.under = under
        self._conn: sqlite3.Connection | None = None
        self.disabled = False
        self.recovered: list[str] = []  # where damaged databases were moved (this process)
        self.skipped_large = 0  # results over their kind's max_stored_bytes, not stored (this process)

    # ------------------------------------------------------------------ opening and recovery
    def files(self) -> list[Path]:
        return [self.path] + [Path(str(self.path) + s) for s in SIDE_FILES]

    def _check_links(self) -> bool:
        for p in self.files():
            try:
                inside(self.root, p)
            except LinkRefused:
                warnings.warn(f"request store disabled: {p} is a link (the cache never follows a link it did not create)",
                              LinkWarning, stacklevel=4)
                self.disabled = True
                return False
        return True

    def _db(self) -> sqlite3.Connection:
        if self._conn is None and self.read_only:
            self._conn = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True, isolation_level=None)
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._conn = self._open()
            except sqlite3.DatabaseError as e:
                if _full(e):
                    raise self._write_error(e) from e
                self.recover(str(e))
                self._conn = self._open()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        existed = self.path.exists()
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            if existed:
                bad = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall() if r[0] != "ok"]
                if bad:
                    raise sqlite3.DatabaseError("; ".join(bad[:3]))
            conn.execute(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def _look_uri(self) -> str:
        """A connection that only looks: ``mode=ro`` still creates ``-wal``/``-shm`` beside a WAL
        database whose WAL is gone (checkpointed); with no WAL there is nothing to miss, so
        ``immutable`` reads the file alone and creates nothing."""
        wal = Path(str(self.path) + "-wal")
        return f"file:{self.path}?mode=ro" + ("" if wal.exists() else "&immutable=1")

    def unreadable(self) -> str | None:
        """Why this user cannot use the database file (``permission denied``), or None."""
        if not self.path.exists() or self.path.is_symlink():
            return None
        need = os.R_OK if self.read_only else os.R_OK | os.W_OK
        return None if os.access(self.path, need) else "permission denied"

    def check(self) -> list[str]:
        """SQLite's integrity check of the database (and its WAL); ``[]`` when sound, absent or unreadable."""
        if not self.path.exists() or not self._check_links() or self.unreadable():
            return []
        try:
            conn = sqlite3.connect(self._look_uri(), uri=True, timeout=60)
            try:
                rows = conn.execute("PRAGMA integrity_check").fetchall()
                conn.execute("SELECT COUNT(*) FROM results").fetchone()
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            return [f"{self.path}: {e}"]
        return [f"{self.path}: {r[0]}" for r in rows if r[0] != "ok"]

    def recover(self, why: str) -> str:
        """Move the damaged database (and its side files) aside; the next use builds an empty one."""
        if self.read_only:  # not ours to move: stop using it
            self.disabled = True
            warnings.warn(f"read-only request database {self.path} is damaged ({why}); not used", DamagedDatabaseWarning, stacklevel=3)
            return str(self.path)
        self.close()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = f"{self.path}.damaged-{stamp}-{os.getpid()}"
        for p in self.files():
            if p.exists() and not p.is_symlink():
                os.replace(p, aside + p.name[len(self.path.name):])
        warnings.warn(f"request database {self.path} was damaged ({why}); moved to {aside} and rebuilt empty",
                      DamagedDatabaseWarning, stacklevel=3)
        self.recovered.append(aside)
        return aside

    def _write_error(self, e: BaseException) -> CacheWriteError:
        return CacheWriteError(errno.ENOSPC, f"cannot write {self.path}: {e}", str(self.path))

    def _guard(self, op, *args):
        """Run ``op`` on the database; a damaged one is recovered once and ``op`` retried."""
        if self.disabled or not self._check_links():
            return None
        if self.unreadable():  # not damaged, not ours: never moved aside, just not used
            self.disabled = True
            warnings.warn(f"request database {self.path} is unreadable to this user ({self.unreadable()}): "
                          "not used and left alone; model answers are not cached this run", DamagedDatabaseWarning, stacklevel=3)
            return None
        try:
            return op(self._db(), *args)
        except sqlite3.DatabaseError as e:
            if _full(e):
                raise self._write_error(e) from e
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise
            self.recover(str(e))
            return op(self._db(), *args)

    # ------------------------------------------------------------------ reading and writing
    def get_many(self, model: str, keys: Iterable[str]) -> dict[str, object]:
        """Results found for ``keys`` (missing and corrupt keys are absent)."""
        keys = list(keys)
        found = (self._guard(self._get_many, model, keys) or {}) if keys and self.path.exists() else {}
        if self.under is not None and len(found) < len(keys):
            found.update(self.under.get_many(model, [k for k in keys if k not in found]))
        return found

    def _get_many(self, db: sqlite3.Connection, model: str, keys: list[str]) -> dict[str, object]:
        found: dict[str, object] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(f"SELECT key, kind, payload FROM results WHERE model=? AND key IN ({marks})", [model, *chunk]).fetchall()
            for key, kind, payload in rows:
                if kind not in RESULT_TYPES:  # a kind whose plugin is not imported here: a miss, left alone
                    continue
                try:
                    value, meta = unpack(bytes(payload), where=f"{self.path}:{key[:12]}")
                    found[key] = result_type(kind).from_arrays(value, meta)
                except NewerFormat:  # a newer evaldag's row: a miss, left alone
                    continue
                except (CorruptEntry, KeyError, TypeError, ValueError) as e:
                    warnings.warn(f"corrupt request-cache row discarded: {e}", CorruptEntryWarning, stacklevel=2)
                    if not self.read_only:
                        db.execute("DELETE FROM results WHERE model=? AND key=?", (model, key))
        return found

    def put_many(self, model: str, items: Iterable[tuple[str, str, object]], meta: dict | None = None) -> None:
        """Store ``(key, kind, result)`` triples in one transaction; ``meta`` (device, dtype, batch) goes in each row."""
        rows = []
        now = time.time()
        for key, kind, result in items:
            arrays = result.to_arrays()
            cap = REQUEST_TYPES[kind].max_stored_bytes if kind in REQUEST_TYPES else None
            if cap is not None and sum(np.asarray(a).nbytes for a in arrays.values()) > cap:
                self.skipped_large += 1  # served to its scorers, never stored (requests.Request.max_stored_bytes)
                continue
            m = {**(result.meta() if hasattr(result, "meta") else {}), **({"run": meta} if meta else {})}
            rows.append((model, key, kind, pack(arrays, m), now))
        if rows and self.read_only:
            raise ReadOnlyCache(f"the cache {self.path.parent} is read-only: cannot store {len(rows)} model answers")
        if rows:
            self._guard(self._put_many, rows)

    @staticmethod
    def _put_many(db: sqlite3.Connection, rows: list) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO results VALUES (?,?,?,?,?)", rows)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite may have rolled back already (a full disk does)
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

    def discard(self, model: str, keys: Iterable[str]) -> None:
        """Delete ``keys`` of ``model`` (answers of a model that turned out not to be the fingerprinted one)."""
        keys = list(keys)

        def _delete(db: sqlite3.Connection) -> None:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                db.execute(f"DELETE FROM results WHERE model=? AND key IN ({','.join('?' * len(chunk))})", [model, *chunk])

        if keys and not self.read_only and self.path.exists():
            self._guard(_delete)

    def peek_count(self) -> tuple[int, str | None]:
        """(rows, problem) read through a read-only connection: ``cache info`` reports a
        damaged database instead of moving it aside as a run (or ``verify --repair``) does."""
        if not self.path.exists() or not self._check_links():
            return 0, None
        try:
            conn = sqlite3.connect(self._look_uri(), uri=True, timeout=60)
            try:
                return int(conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]), None
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            return 0, f"{self.path}: {e}"

    def count(self) -> int:
        if not self.path.exists():
            return 0
        return self._guard(lambda db: db.execute("SELECT COUNT(*) FROM results").fetchone()[0]) or 0

    def prune(self, cutoff: float) -> int:
        return self._guard(lambda db: db.execute("DELETE FROM results WHERE written < ?", (cutoff,)).rowcount) or 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
