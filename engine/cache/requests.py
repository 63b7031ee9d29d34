"""The request store: results of model work keyed by (model key, request key).

The model key is the model's fingerprint plus the device type it runs on (and ``det``
under ``--deterministic``), so a CPU fp32 answer is never served to a CUDA bf16 run.
Each result is packed exactly like a node entry (safetensors bytes with a checksummed
JSON skeleton) plus the device, dtype and batch it was computed in; a bad one is a miss,
never unpickled.

The truth is the batch files of batches.py: each ``put_many`` (one finished batch) is one
content-addressed file renamed into place, so a killed run keeps every finished batch and
N processes on N hosts may store into one cache folder on a shared file system at once,
with no lock at all: the worst case is two hosts computing the same answers, never a
wrong or lost one. To find a key without reading every file, each host keeps an index,
``index/requests-<host>.sqlite`` (files.host_id): key -> (file, offset, length). It is an
accelerator only: before a lookup, the model's folder is listed and files the index has
not seen are read into it (files gone are dropped from it); a damaged index is deleted
with a warning and rebuilt from the files; where no index can be kept (a read-only
cache, an index that cannot be opened) one is built in memory for the process. The
processes of one host share its index through SQLite's WAL, which needs nothing across
hosts. A file whose bytes no longer hash to its name is skipped with a warning (and
deleted when the cache is writable); the run recomputes those answers.

A result type whose plugin is not imported, or a row in a newer evaldag's format, is a
miss, never deleted. ``under`` is a read-only store read for keys this one lacks
(``--cache-read-from``).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Iterable

from . import batches
from ..requests import RESULT_TYPES, result_type, too_large
from .batches import BadBatch, Batch
from .codec import CorruptEntry, CorruptEntryWarning, NewerFormat, pack, unpack
from .files import CacheWriteError, LinkRefused, LinkWarning, host_id, inside
from .safety import ReadOnlyCache

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS files (name TEXT NOT NULL, model TEXT NOT NULL, PRIMARY KEY (model, name))",
    "CREATE TABLE IF NOT EXISTS results (model TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, file TEXT NOT NULL,"
    " offset INTEGER NOT NULL, length INTEGER NOT NULL, written REAL NOT NULL, PRIMARY KEY (model, key))",
    "CREATE TABLE IF NOT EXISTS tombs (model TEXT NOT NULL, key TEXT NOT NULL, written REAL NOT NULL, PRIMARY KEY (model, key))",
)
_UPSERT = ("INSERT INTO results VALUES (?,?,?,?,?,?,?) ON CONFLICT(model, key) DO UPDATE SET kind=excluded.kind, "
           "file=excluded.file, offset=excluded.offset, length=excluded.length, written=excluded.written "
           "WHERE excluded.written >= results.written")
SIDE_FILES = ("-wal", "-shm", "-journal")


class DamagedDatabaseWarning(UserWarning):
    """A host's request index was damaged; it was deleted and rebuilt from the batch files."""


def _full(e: BaseException) -> bool:
    return isinstance(e, sqlite3.OperationalError) and "full" in str(e).lower()


class RequestStore:
    """Per-model results of requests. Safe to share between processes and hosts (see above)."""

    def __init__(self, root: str | Path, *, read_only: bool = False, under: "RequestStore | None" = None):
        self.root = Path(root)
        self.path = self.root / batches.FOLDER  # the batch files: what the store holds
        self.index_path = self.root / "index" / f"requests-{host_id()}.sqlite"
        self.read_only = read_only  # nothing written: the index lives in memory
        self.under = under
        self._conn: sqlite3.Connection | None = None
        self.disabled = False
        self.recovered: list[str] = []  # indexes this process found damaged and rebuilt
        self.skipped: list[str] = []  # batch files found damaged (this process)
        self.skipped_large = 0  # results over their kind's max_stored_bytes, not stored (this process)

    # ------------------------------------------------------------------ the index
    def files(self) -> list[Path]:
        return [self.index_path] + [Path(str(self.index_path) + s) for s in SIDE_FILES]

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            return self._memory()
        batches.migrate_legacy(self.root)  # an older evaldag's requests.sqlite, once
        if self.index_path.exists() and not os.access(self.index_path, os.R_OK | os.W_OK):
            return self._memory()  # another user's index on this host (umask 077): theirs, left alone
        try:
            for p in self.files():
                inside(self.root, p)
            self.index_path.parent.mkdir(parents=True, exist_ok=True)
            inside(self.root, self.index_path.parent)
            try:
                return self._open()
            except sqlite3.DatabaseError as e:
                if _full(e):
                    raise self._write_error(e) from e
                self._drop(str(e))
                return self._open()
        except (OSError, LinkRefused, sqlite3.Error) as e:  # an index that cannot be kept here: one in memory
            if isinstance(e, CacheWriteError):
                raise
            linked = isinstance(e, LinkRefused)
            warnings.warn(f"request index {self.index_path} not used ({e.filename + ' is a link' if linked else e}); "
                          "indexing in memory for this process", LinkWarning if linked else DamagedDatabaseWarning,
                          stacklevel=4)
            return self._memory()

    def _open(self) -> sqlite3.Connection:
        existed = self.index_path.exists()
        conn = sqlite3.connect(self.index_path, timeout=60, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            if existed:
                bad = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall() if r[0] != "ok"]
                if bad:
                    raise sqlite3.DatabaseError("; ".join(bad[:3]))
            for stmt in _SCHEMA:
                conn.execute(stmt)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _memory() -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None)
        for stmt in _SCHEMA:
            conn.execute(stmt)
        return conn

    def _drop(self, why: str) -> None:
        """Delete this host's damaged index (it holds nothing the batch files do not)."""
        self.close()
        for p in self.files():
            if p.exists() and not p.is_symlink():
                p.unlink()
        warnings.warn(f"request index {self.index_path} was damaged ({why}); deleted and rebuilt from the batch files "
                      f"in {self.path}", DamagedDatabaseWarning, stacklevel=4)
        self.recovered.append(str(self.index_path))

    def recover(self, why: str) -> str:
        self._drop(why)
        return str(self.index_path)

    def _write_error(self, e: BaseException) -> CacheWriteError:
        return CacheWriteError(errno.ENOSPC, f"cannot write {self.index_path}: {e}", str(self.index_path))

    def _guard(self, op, *args):
        """Run ``op`` on the index; a damaged index is rebuilt once and ``op`` retried."""
        if self.disabled:
            return None
        try:
            return op(self._db(), *args)
        except sqlite3.DatabaseError as e:
            if _full(e):
                raise self._write_error(e) from e
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise
            self._drop(str(e))
            return op(self._db(), *args)

    # ------------------------------------------------------------------ the files into the index
    def _sync(self, db: sqlite3.Connection, model: str) -> None:
        """Index the model's batch files this index has not seen; forget those that are gone."""
        folder = batches.model_dir(self.root, model)
        # what the index knows first, then the folder: a file another process indexed meanwhile is then
        # listed too, so "known but not listed" means gone (pruned, repaired), never "too new to list"
        known = {r[0] for r in db.execute("SELECT name FROM files WHERE model=?", (model,))}
        present = set(batches.names(folder))
        new = sorted(present - known)
        found = []
        for name in new:
            try:
                b = batches.read(self.root, folder / name)
            except BadBatch as e:
                self._bad(folder / name, str(e))
                continue
            except (OSError, LinkRefused):  # pruned meanwhile, or not ours to read
                continue
            if b.model != model:
                self._bad(folder / name, f"{folder / name}: holds answers of another model (misplaced)")
                continue
            found.append(b)
        if not found and not known - present:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            for name in known - present:
                self._forget(db, model, name)
            for b in sorted(found, key=lambda b: b.written):
                self._apply(db, model, b)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    @staticmethod
    def _forget(db: sqlite3.Connection, model: str, name: str) -> None:
        db.execute("DELETE FROM results WHERE model=? AND file=?", (model, name))
        db.execute("DELETE FROM files WHERE model=? AND name=?", (model, name))

    @staticmethod
    def _apply(db: sqlite3.Connection, model: str, b: Batch) -> None:
        db.execute("INSERT OR IGNORE INTO files VALUES (?,?)", (b.name, model))
        for key in b.discard:  # answers taken back: every row written up to then goes
            db.execute("INSERT INTO tombs VALUES (?,?,?) ON CONFLICT(model, key) DO UPDATE SET written=excluded.written "
                       "WHERE excluded.written > tombs.written", (model, key, b.written))
            db.execute("DELETE FROM results WHERE model=? AND key=? AND written <= ?", (model, key, b.written))
        if not b.rows:
            return
        tombs = dict(db.execute("SELECT key, written FROM tombs WHERE model=?", (model,)).fetchall())
        db.executemany(_UPSERT, [(model, k, kind, b.name, o, ln, w) for k, kind, o, ln, w in b.rows
                                 if tombs.get(k, -1.0) < w])

    def _bad(self, path: Path, why: str) -> None:
        self.skipped.append(why)
        gone = not self.read_only
        if gone:
            try:
                path.unlink()
            except OSError:
                gone = False
        warnings.warn(f"damaged request batch {'deleted' if gone else 'skipped'}, its answers will be recomputed: {why}",
                      CorruptEntryWarning, stacklevel=4)

    # ------------------------------------------------------------------ reading and writing
    def get_many(self, model: str, keys: Iterable[str]) -> dict[str, object]:
        """Results found for ``keys`` (missing and corrupt keys are absent)."""
        keys = list(keys)
        here = self.path.is_dir() or (self.root / batches.LEGACY).is_file()
        found = (self._guard(self._get_many, model, keys) or {}) if keys and here else {}
        if self.under is not None and len(found) < len(keys):
            found.update(self.under.get_many(model, [k for k in keys if k not in found]))
        return found

    def _get_many(self, db: sqlite3.Connection, model: str, keys: list[str]) -> dict[str, object]:
        self._sync(db, model)
        rows = []
        for i in range(0, len(keys), 500):
            chunk = keys[i: i + 500]
            rows += db.execute(f"SELECT key, kind, file, offset, length FROM results WHERE model=? AND key IN "
                               f"({','.join('?' * len(chunk))})", [model, *chunk]).fetchall()
        found: dict[str, object] = {}
        bad: set[str] = set()
        for key, kind, name, offset, length in sorted(rows, key=lambda r: (r[2], r[3])):
            if kind not in RESULT_TYPES or name in bad:  # a kind whose plugin is not imported here: a miss
                continue
            try:
                data = batches.payload(self.root, model, name, offset, length)
                value, meta = unpack(data, where=f"{name}:{key[:12]}")
                found[key] = result_type(kind).from_arrays(value, meta)
            except NewerFormat:  # a newer evaldag's row: a miss, left alone
                continue
            except (OSError, LinkRefused):  # the file went (pruned on another host): forget it
                self._forget(db, model, name)
                bad.add(name)
            except (CorruptEntry, BadBatch, KeyError, TypeError, ValueError) as e:
                self._bad(batches.model_dir(self.root, model) / name, str(e))
                self._forget(db, model, name)
                bad.add(name)
                found = {k: v for k, v in found.items() if k not in {r[0] for r in rows if r[2] == name}}
        return found

    def put_many(self, model: str, items: Iterable[tuple[str, str, object]], meta: dict | None = None) -> None:
        """Store ``(key, kind, result)`` triples as one batch file; ``meta`` (device, dtype, batch) goes in each row."""
        rows = []
        for key, kind, result in items:
            arrays = result.to_arrays()
            if too_large(kind, arrays):  # served to its scorers, never stored (requests.Request.max_stored_bytes)
                self.skipped_large += 1
                continue
            m = {**(result.meta() if hasattr(result, "meta") else {}), **({"run": meta} if meta else {})}
            rows.append((key, kind, pack(arrays, m)))
        if rows and self.read_only:
            raise ReadOnlyCache(f"the cache {self.root} is read-only: cannot store {len(rows)} model answers")
        if rows:
            self._store(model, rows, [])

    def _store(self, model: str, rows: list, discard: list[str]) -> None:
        try:
            data = batches.encode(model, rows, time.time(), discard)
            b = batches.parse(batches.store(self.root, model, data), data)  # indexed from memory, not read back
        except LinkRefused as e:
            warnings.warn(f"request batch not stored: {e.filename} is a link (the cache never follows a link it "
                          "did not create)", CorruptEntryWarning, stacklevel=3)
            return
        self._guard(self._index_one, model, b)

    def _index_one(self, db: sqlite3.Connection, model: str, b: Batch) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            self._apply(db, model, b)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def discard(self, model: str, keys: Iterable[str]) -> None:
        """Take back ``keys`` of ``model`` (answers of a model that turned out not to be the fingerprinted
        one): a newer discard file, so every host's index drops them too."""
        keys = list(keys)
        if keys and not self.read_only:
            self._store(model, [], keys)

    # ------------------------------------------------------------------ whole-store views
    def models(self) -> list[str]:
        """The model keys with batch files here (read from one header per folder)."""
        out = []
        for folder in batches.model_dirs(self.root):
            for name in batches.names(folder):
                try:
                    out.append(batches.read(self.root, folder / name).model)
                    break
                except (BadBatch, OSError, LinkRefused):
                    continue
        return out

    def count(self) -> int:
        """Answers held (every model's folder indexed first)."""
        if not self.path.is_dir():
            return 0

        def _count(db: sqlite3.Connection) -> int:
            for model in self.models():
                self._sync(db, model)
            return db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

        return self._guard(_count) or 0

    def peek_count(self) -> tuple[int, str | None]:
        """(answers, problem): what ``cache info`` shows; damaged batch files are named, not moved."""
        n = self.count()
        if self.skipped:
            return n, f"{len(self.skipped)} damaged request batch files skipped (first: {self.skipped[0]}); "
        return n, self.unreadable()

    def check(self) -> list[str]:
        """``"path: why"`` for each batch file that does not hash to its name or cannot be parsed."""
        bad = []
        for folder in batches.model_dirs(self.root):
            for name in batches.names(folder):
                try:
                    batches.read(self.root, folder / name)
                except BadBatch as e:
                    bad.append(str(e))
                except (OSError, LinkRefused):
                    continue
        return bad

    def repair(self) -> list[str]:
        """Delete damaged batch files (their answers are recomputed by the next run)."""
        done = []
        for why in self.check():
            path = Path(why.split(": ", 1)[0])
            path.unlink(missing_ok=True)
            done.append(f"removed {path}")
        return done

    def unreadable(self) -> str | None:
        """Why this user cannot read some batch files (another user's under umask 077), or None."""
        if not self.path.is_dir() or self.path.is_symlink():
            return None
        if not os.access(self.path, os.R_OK | os.X_OK):
            return "permission denied"
        denied = [f / n for f in batches.model_dirs(self.root) for n in batches.names(f) if not os.access(f / n, os.R_OK)]
        return f"permission denied on {len(denied)} batch files (first: {denied[0]})" if denied else None

    def nbytes(self) -> int:
        return sum((f / n).stat().st_size for f in batches.model_dirs(self.root) for n in batches.names(f))

    def prune(self, cutoff: float) -> int:
        """Delete batch files written before ``cutoff``; returns the answers they held."""
        n = 0
        for folder in batches.model_dirs(self.root):
            for name in batches.names(folder):
                p = folder / name
                try:
                    if p.lstat().st_mtime < cutoff:
                        n += len(batches.read(self.root, p).rows)
                        p.unlink()
                except (BadBatch, OSError, LinkRefused):
                    continue
        return n

    def close(self) -> None:
        if self._conn is not None:  # the next use opens it again
            self._conn.close()
            self._conn = None
