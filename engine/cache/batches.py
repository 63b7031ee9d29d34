"""Request results as content-addressed batch files: the request store's ground truth.

Why files and not one database: N jobs on N hosts may share one cache folder on NFS or
Lustre, and neither SQLite's WAL (shared memory) nor ``fcntl`` locks work across hosts
there. What every shared file system does give is an atomic rename within a folder. So
each batch of results the executor stores becomes one immutable file::

    requests/<sha256(model)[:32]>/<sha256(file bytes)>.batch

written to a unique temporary and renamed into place (files.py). Its name is the hash of
its bytes: two writers of the same bytes write the same name, a file is never changed
after its rename, and a reader that sees a name sees the whole file. A file that does
not hash to its name is damaged (bit rot, a hand edit) and is skipped. Any reader lists
a model's folder and indexes what it finds (requests.py keeps that index per host).

A file's layout: :data:`MAGIC`, the header's length (8 bytes, little-endian), the JSON
header ``{"model", "written", "rows": [[key, kind, offset, length, written], ...],
"discard": [keys]}`` and the rows' payloads, each a checksummed codec blob (codec.py).
A *discard* file (rows empty) takes back earlier answers of those keys: answers of a
model that changed under the run (executor.py) are withdrawn by a newer file, never by
editing an old one.

A cache written before this layout holds ``requests.sqlite``; :func:`migrate_legacy`
turns its rows into batch files once (deterministically: two processes migrating at
once write the same names) and renames the database aside.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from .files import LinkRefused, atomic_write, inside, is_temp

MAGIC = b"EVRQBAT1"
SUFFIX = ".batch"
FOLDER = "requests"
MAX_HEADER = 64 << 20
MAX_FILE = 4 << 30
LEGACY = "requests.sqlite"


class BadBatch(ValueError):
    """A batch file that does not hash to its name or cannot be parsed."""


@dataclass
class Batch:
    """One parsed batch file: its rows (key, kind, offset, length, written) and discarded keys."""

    name: str
    model: str
    written: float
    rows: list[tuple[str, str, int, int, float]] = field(default_factory=list)
    discard: list[str] = field(default_factory=list)


def model_dir(root: Path, model: str) -> Path:
    return Path(root) / FOLDER / hashlib.sha256(model.encode()).hexdigest()[:32]


def encode(model: str, rows: list[tuple[str, str, bytes]], written: float, discard: list[str] = ()) -> bytes:
    """The bytes of a batch file holding ``(key, kind, payload)`` rows (all written at ``written``)."""
    table, offset = [], 0
    for key, kind, payload in rows:
        table.append([key, kind, offset, len(payload), written])
        offset += len(payload)
    head = json.dumps({"model": model, "written": written, "rows": table, "discard": list(discard)},
                      sort_keys=True, separators=(",", ":")).encode()
    return b"".join([MAGIC, len(head).to_bytes(8, "little"), head, *(p for _, _, p in rows)])


def body_start(data_or_head: bytes) -> int:
    return len(MAGIC) + 8 + int.from_bytes(data_or_head[len(MAGIC): len(MAGIC) + 8], "little")


def write(root: Path, model: str, rows: list[tuple[str, str, bytes]], written: float | None = None,
          discard: list[str] = ()) -> Path:
    """Write one batch file for ``model`` (atomic, content-addressed); returns its path."""
    return store(root, model, encode(model, rows, time.time() if written is None else written, discard))


def store(root: Path, model: str, data: bytes) -> Path:
    """Put the bytes of one batch file under their hash (atomic; already there: nothing to do)."""
    path = model_dir(root, model) / (hashlib.sha256(data).hexdigest() + SUFFIX)
    if not path.exists():
        atomic_write(path, data, root=root)
    return path


def parse(path: Path, data: bytes) -> Batch:
    """Check ``data`` (the bytes of ``path``) against its name and parse its header."""
    if hashlib.sha256(data).hexdigest() != path.name[: -len(SUFFIX)]:
        raise BadBatch(f"{path}: its bytes do not hash to its name (damaged)")
    if data[: len(MAGIC)] != MAGIC or len(data) < len(MAGIC) + 8:
        raise BadBatch(f"{path}: not a request batch file")
    n = int.from_bytes(data[len(MAGIC): len(MAGIC) + 8], "little")
    if not 0 < n <= min(MAX_HEADER, len(data) - len(MAGIC) - 8):
        raise BadBatch(f"{path}: header length {n} does not fit the {len(data)}-byte file")
    try:
        head = json.loads(data[len(MAGIC) + 8: len(MAGIC) + 8 + n])
        rows = [(str(k), str(kind), int(o), int(ln), float(w)) for k, kind, o, ln, w in head["rows"]]
        batch = Batch(path.name, str(head["model"]), float(head["written"]), rows, [str(k) for k in head["discard"]])
    except (ValueError, TypeError, KeyError, RecursionError) as e:
        raise BadBatch(f"{path}: unreadable header ({e})") from None
    body = len(data) - len(MAGIC) - 8 - n
    if any(o < 0 or ln < 0 or o + ln > body for _, _, o, ln, _ in rows):
        raise BadBatch(f"{path}: a row lies outside the file")
    return batch


def read(root: Path, path: Path) -> Batch:
    """Read and check one batch file (no link followed, no oversized file read)."""
    inside(Path(root), path)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size > MAX_FILE:
            raise BadBatch(f"{path}: larger than any batch")
        return parse(path, f.read())


def names(folder: Path) -> list[str]:
    """The batch files in a model's folder (temporaries and links left out)."""
    try:
        return sorted(p.name for p in folder.iterdir()
                      if p.name.endswith(SUFFIX) and not is_temp(p) and not p.is_symlink())
    except OSError:  # no such folder yet, or not ours to list
        return []


def links(root: Path) -> list[Path]:
    """The links among the request folders and batch files (``names`` and ``model_dirs`` leave them out)."""
    top = Path(root) / FOLDER
    try:
        inside(Path(root), top)
        dirs = sorted(top.iterdir())
        return [p for d in dirs for p in ([d] if d.is_symlink() else sorted(d.iterdir()) if d.is_dir() else [])
                if p.is_symlink() and (p.parent == top or p.name.endswith(SUFFIX))]
    except (OSError, LinkRefused):
        return []


def model_dirs(root: Path) -> list[Path]:
    top = Path(root) / FOLDER
    try:
        inside(Path(root), top)
        return sorted(p for p in top.iterdir() if p.is_dir() and not p.is_symlink() and len(p.name) == 32)
    except (OSError, LinkRefused):
        return []


def payload(root: Path, model: str, name: str, offset: int, length: int) -> bytes:
    """One row's payload bytes, read from its file (the file was checked when it was indexed)."""
    path = model_dir(root, model) / name
    inside(Path(root), path)
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 8)
        f.seek(body_start(head) + offset)
        data = f.read(length)
    if len(data) != length:
        raise BadBatch(f"{path}: shorter than its header says")
    return data


def legacy_batches(root: Path) -> list[tuple[str, list[tuple[str, str, bytes]], float]]:
    """An older evaldag's ``requests.sqlite`` under ``root`` as (model, rows, written) batches, read
    only, in a fixed order (per model, by key, 4096 rows a batch); [] when absent or unreadable."""
    db = Path(root) / LEGACY
    if not db.is_file() or db.is_symlink():
        return []
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
        try:
            rows = conn.execute("SELECT model, key, kind, payload, written FROM results ORDER BY model, key").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:  # damaged or unreadable: left where it is, never deleted
        return []
    by_model: dict[str, list] = {}
    for model, key, kind, data, written in rows:
        by_model.setdefault(model, []).append((key, kind, bytes(data), float(written)))
    out = []
    for model, items in by_model.items():
        for i in range(0, len(items), 4096):
            chunk = items[i: i + 4096]
            out.append((model, [(k, kind, d) for k, kind, d, _ in chunk], max(w for *_, w in chunk)))
    return out


def migrate_legacy(root: Path) -> int:
    """Turn an older evaldag's ``requests.sqlite`` into batch files once, then rename it aside.

    The batches are written in a fixed order with the rows' own times, so two processes doing
    this at once write byte-identical files (the same names): no row is lost or doubled.
    Returns the rows moved (0 when there is no legacy database or it cannot be read)."""
    found = legacy_batches(root)
    if not found:
        return 0
    for model, rows, written in found:
        write(root, model, rows, written=written)
    db = Path(root) / LEGACY
    for suffix in ("", "-wal", "-shm"):
        try:
            os.replace(f"{db}{suffix}", f"{db}.migrated{suffix}")
        except OSError:  # another process moved it first, or there was no such side file
            pass
    return sum(len(rows) for _, rows, _ in found)
