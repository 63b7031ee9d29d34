"""The request store: results of model work keyed by (model fingerprint, request key).

One SQLite file (WAL mode) beside the node store. Each row holds one request's result
packed exactly like a node entry (safetensors bytes with a checksummed JSON skeleton),
so a bad row is detected and treated as a miss, never unpickled. The executor writes a
whole batch in one transaction the moment the batch finishes: a killed run keeps every
finished batch, and a rerun forwards only what is missing.
"""

from __future__ import annotations

import sqlite3
import time
import warnings
from pathlib import Path
from typing import Iterable

from ..requests import RESULT_TYPES
from .codec import CorruptEntry, CorruptEntryWarning, pack, unpack
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


class RequestStore:
    """Per-model results of requests. Safe to share between processes on one machine."""

    def __init__(self, root: str | Path, *, read_only: bool = False, under: "RequestStore | None" = None):
        self.path = Path(root) / "requests.sqlite"
        self.read_only = read_only  # opened immutable: no journal, no lock, no write
        self.under = under  # a read-only store read for keys this one lacks (--cache-read-from)
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None and self.read_only:
            self._conn = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True, isolation_level=None)
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            self._conn = conn
        return self._conn

    def get_many(self, model_fp: str, keys: Iterable[str]) -> dict[str, object]:
        """Results found for ``keys`` (missing and corrupt keys are absent)."""
        keys = list(keys)
        found = self._get_many(model_fp, keys)
        if self.under is not None and len(found) < len(keys):
            found.update(self.under.get_many(model_fp, [k for k in keys if k not in found]))
        return found

    def _get_many(self, model_fp: str, keys: list[str]) -> dict[str, object]:
        if not keys or not self.path.exists():
            return {}
        db = self._db()
        found: dict[str, object] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT key, kind, payload FROM results WHERE model=? AND key IN ({marks})", [model_fp, *chunk]
            ).fetchall()
            for key, kind, payload in rows:
                try:
                    value, meta = unpack(bytes(payload), where=f"{self.path}:{key[:12]}")
                    found[key] = RESULT_TYPES[kind].from_arrays(value, meta)
                except (CorruptEntry, KeyError) as e:
                    warnings.warn(f"corrupt request-cache row discarded: {e}", CorruptEntryWarning, stacklevel=2)
                    if not self.read_only:
                        db.execute("DELETE FROM results WHERE model=? AND key=?", (model_fp, key))
        return found

    def put_many(self, model_fp: str, items: Iterable[tuple[str, str, object]]) -> None:
        """Store ``(key, kind, result)`` triples in one transaction."""
        rows = []
        now = time.time()
        for key, kind, result in items:
            meta = result.meta() if hasattr(result, "meta") else {}
            rows.append((model_fp, key, kind, pack(result.to_arrays(), meta), now))
        if not rows:
            return
        if self.read_only:
            raise ReadOnlyCache(f"the cache {self.path.parent} is read-only: cannot store {len(rows)} model answers")
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO results VALUES (?,?,?,?,?)", rows)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def count(self) -> int:
        if not self.path.exists():
            return 0
        return self._db().execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def prune(self, cutoff: float) -> int:
        cur = self._db().execute("DELETE FROM results WHERE written < ?", (cutoff,))
        return cur.rowcount

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
