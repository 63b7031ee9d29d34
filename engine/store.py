"""The node store: one content-addressed, checksummed, atomically written file per node.

Layout under the cache root::

    objects/<fp[:2]>/<fp>.safetensors   a node's value: arrays + JSON skeleton + metadata
    locks/<fp[:2]>/<fp>.lock            held while a process computes that node
    history/<sha(name)>.json            the components a display name had last time
    requests.sqlite                     the request cache (see request_cache.py)

Every entry is one safetensors file written to a temp file and renamed into place, so
a reader sees a whole entry or none. Its ``__metadata__`` carries a sha256 over the
skeleton, the metadata and every array; a mismatch or a truncated file is reported,
the entry discarded and the node recomputed. Nothing is ever unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from filelock import FileLock, Timeout

from . import codec

FORMAT = "evaldag-node-1"
_UMASK = os.umask(0)
os.umask(_UMASK)


class CorruptEntry(Exception):
    """An entry failed its checksum or could not be parsed."""


class CorruptEntryWarning(UserWarning):
    """A cache entry was corrupt; it was discarded and will be recomputed."""


def default_cache_dir() -> Path:
    """``EVALDAG_CACHE_DIR``, else the user cache dir (``~/.cache/evaldag`` on Linux)."""
    env = os.environ.get("EVALDAG_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("evaldag", appauthor=False))


@dataclass
class Entry:
    fingerprint: str
    value: Any
    meta: dict


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a shared cache must be readable
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def pack(value: Any, meta: dict) -> bytes:
    """Serialise a value and its metadata into safetensors bytes with a checksum."""
    from safetensors.numpy import save

    skeleton, arrays = codec.encode(value)
    # key order is part of the value (WEFE's per-word dicts are ordered): keep it
    skeleton_json = json.dumps(skeleton, separators=(",", ":"))
    meta_json = json.dumps(meta, sort_keys=True, separators=(",", ":"), default=str)
    digest = codec.checksum(skeleton_json, meta_json, arrays)
    return save(arrays, metadata={"format": FORMAT, "skeleton": skeleton_json, "meta": meta_json, "sha256": digest})


def unpack(data: bytes, where: str = "") -> tuple[Any, dict]:
    """Inverse of :func:`pack`; raises :class:`CorruptEntry` on any mismatch."""
    from safetensors.numpy import load

    try:
        header_len = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + header_len])
        md = header["__metadata__"]
        if md.get("format") != FORMAT:
            raise CorruptEntry(f"{where}: unknown format {md.get('format')!r}")
        arrays = load(data)
    except CorruptEntry:
        raise
    except Exception as e:  # truncated, not JSON, not safetensors...
        raise CorruptEntry(f"{where}: unreadable ({type(e).__name__}: {e})") from None
    if codec.checksum(md["skeleton"], md["meta"], arrays) != md["sha256"]:
        raise CorruptEntry(f"{where}: checksum mismatch")
    return codec.decode(json.loads(md["skeleton"]), arrays), json.loads(md["meta"])


class Store:
    """Content-addressed node store rooted at ``root`` (created on first write)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        self.corrupt: list[str] = []  # fingerprints found corrupt during this process

    # ------------------------------------------------------------------ paths
    def path(self, fp: str) -> Path:
        return self.root / "objects" / fp[:2] / f"{fp}.safetensors"

    def lock(self, fp: str) -> FileLock:
        p = self.root / "locks" / fp[:2] / f"{fp}.lock"
        p.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(p))

    # ------------------------------------------------------------------ nodes
    def has(self, fp: str) -> bool:
        return self.path(fp).exists()

    def get(self, fp: str) -> Entry | None:
        """The entry, or None if absent. A corrupt entry is warned about and deleted."""
        p = self.path(fp)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            return None
        try:
            value, meta = unpack(data, where=str(p))
        except CorruptEntry as e:
            warnings.warn(f"corrupt cache entry discarded, will recompute: {e}", CorruptEntryWarning, stacklevel=2)
            self.corrupt.append(fp)
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            return None
        return Entry(fp, value, meta)

    def put(self, fp: str, value: Any, meta: dict) -> None:
        meta = {**meta, "fingerprint": fp, "written_at": time.time()}
        _atomic_write(self.path(fp), pack(value, meta))

    def try_lock(self, fp: str) -> FileLock | None:
        """Take the node's lock without waiting; None if another process holds it."""
        lk = self.lock(fp)
        try:
            lk.acquire(timeout=0)
        except Timeout:
            return None
        return lk

    # ------------------------------------------------------------------ history
    def _history_path(self, name: str) -> Path:
        return self.root / "history" / (hashlib.sha256(name.encode()).hexdigest()[:32] + ".json")

    def last_components(self, name: str) -> dict | None:
        try:
            return json.loads(self._history_path(name).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def remember_components(self, name: str, components: dict) -> None:
        _atomic_write(self._history_path(name), json.dumps(components, sort_keys=True).encode())

    # ------------------------------------------------------------------ maintenance
    def entries(self) -> Iterator[Path]:
        objects = self.root / "objects"
        if objects.exists():
            yield from sorted(objects.glob("*/*.safetensors"))

    def info(self) -> dict:
        files = list(self.entries())
        req = self.root / "requests.sqlite"
        from .request_cache import RequestCache

        return {
            "root": str(self.root),
            "nodes": len(files),
            "node_bytes": sum(f.stat().st_size for f in files),
            "requests": RequestCache(self.root).count() if req.exists() else 0,
            "request_bytes": req.stat().st_size if req.exists() else 0,
        }

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

    def prune(self, older_than_seconds: float) -> int:
        """Delete node entries not read or written for ``older_than_seconds``."""
        cutoff = time.time() - older_than_seconds
        n = 0
        for p in self.entries():
            if max(p.stat().st_mtime, p.stat().st_atime) < cutoff:
                p.unlink()
                n += 1
        from .request_cache import RequestCache

        if (self.root / "requests.sqlite").exists():
            n += RequestCache(self.root).prune(cutoff)
        return n

    def clear(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)

    def touch(self, fp: str) -> None:
        try:
            os.utime(self.path(fp))
        except FileNotFoundError:
            pass

