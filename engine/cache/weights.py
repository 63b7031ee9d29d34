"""Trained weights in the cache: a derived model that trains (a relearn) is stored once, as a folder.

::

    <root>/weights/<ab>/<key>/manifest.json        what it is, and the sha256 of every other file
    <root>/weights/<ab>/<key>/model.safetensors    a full relearn's weights (config and tokenizer beside)
    <root>/weights/<ab>/<key>/adapter_model.safetensors + adapter_config.json   a LoRA relearn: the adapter only

``key`` is the derived model's fingerprint: its parent's fingerprint, the transform's name, code
version and parameters (its recipe) and the training data's fingerprint. The folder is what the
weight readers read (safetensors, a transformers or PEFT folder), so a stored relearn loads as any
checkpoint does. Training on a GPU is not bit-reproducible: a stored relearn is *one* training run,
keyed by its recipe, and nothing retrains it to compare.

A folder is written whole or not at all: its files go into a temporary folder beside it
(``TMP_PREFIX``), the manifest last, then one rename publishes it. Reading checks the manifest's own
checksum and each file's size; :meth:`WeightStore.verify` (``evaldag cache verify``) and every load
(:meth:`WeightStore.checked`) check each file's sha256 against the manifest. No file is unpickled:
safetensors and JSON only.

A run with ``--cache-read-from OTHER`` reads trained weights through OTHER's store (``under``) as
the node and request stores read through theirs: a key this cache lacks is looked up there, checked
the same way, loaded from where it lies and never copied, touched or written there. The running
cache's store is the one :func:`active_weights` returns (``run.execute`` activates it), so a
transform that trains finds it without being handed the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator

from .files import TMP_PREFIX, LinkRefused, inside, write_error

FOLDER = "weights"
MANIFEST = "manifest.json"
FORMAT = 1
_KEY = re.compile(r"[0-9a-f]{64}")
#: the files a stored folder may hold: weights as safetensors, configs and tokenizer files as text
ALLOWED = re.compile(r"[\w.-]+\.(safetensors|json|txt|model|jinja)")


class CorruptWeights(ValueError):
    """A stored weights folder whose manifest or files do not check: one line naming it."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _manifest_digest(body: dict) -> str:
    return hashlib.sha256(json.dumps({k: v for k, v in body.items() if k != "checksum"}, sort_keys=True).encode()).hexdigest()


class WeightStore:
    """The ``weights/`` folders under one cache root."""

    def __init__(self, root: str | os.PathLike, *, read_only: bool = False, under: "WeightStore | None" = None):
        self.root = Path(root)
        self.top = self.root / FOLDER
        self.read_only = read_only
        self.under = under  # a read-only store read where this one has no folder (--cache-read-from)

    @contextmanager
    def active(self) -> Iterator["WeightStore"]:
        """Make this store the one :func:`active_weights` returns, for the ``with`` block."""
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    def path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"a weights key is 64 hex digits, not {key!r}")
        return self.top / key[:2] / key

    def entries(self) -> Iterator[Path]:
        """Stored folders (never a temporary, never a link)."""
        if not self.top.is_dir() or self.top.is_symlink():
            return
        for sub in sorted(self.top.iterdir()):
            if sub.is_symlink() or not sub.is_dir() or not re.fullmatch(r"[0-9a-f]{2}", sub.name):
                continue
            for d in sorted(sub.iterdir()):
                if not d.is_symlink() and d.is_dir() and _KEY.fullmatch(d.name) and d.name[:2] == sub.name:
                    yield d

    def manifest(self, key: str) -> dict | None:
        """The stored folder's manifest, its own checksum and its files' sizes checked; None: not stored.
        A damaged one raises :class:`CorruptWeights`."""
        folder = self.path(key)
        try:
            inside(self.root, folder / MANIFEST)
            text = (folder / MANIFEST).read_text()
        except (FileNotFoundError, NotADirectoryError, LinkRefused):
            return None
        try:
            body = json.loads(text)
        except ValueError:
            raise CorruptWeights(f"{folder / MANIFEST}: not JSON") from None
        if not isinstance(body, dict) or body.get("checksum") != _manifest_digest(body) or body.get("key") != key:
            raise CorruptWeights(f"{folder / MANIFEST}: its checksum or key does not match")
        if body.get("format", 0) > FORMAT:
            raise CorruptWeights(f"{folder}: written by a newer evaldag (format {body.get('format')}); left alone")
        for name, (size, _) in body["files"].items():
            p = folder / name
            if p.is_symlink() or not p.is_file() or p.stat().st_size != size:
                raise CorruptWeights(f"{p}: missing, a link, or not the {size} bytes the manifest says")
        return body

    def has(self, key: str) -> bool:
        """Stored here, or in the read-only store under this one."""
        return self._here(key) or (self.under is not None and self.under.has(key))

    def _here(self, key: str) -> bool:
        try:
            return self.manifest(key) is not None
        except CorruptWeights:
            return False

    def checked(self, key: str) -> Path:
        """The folder, every file's sha256 checked against the manifest (before weights are read);
        this store's own, else the one under it."""
        body = self.manifest(key)
        if body is None:
            if self.under is not None and self.under.has(key):
                return self.under.checked(key)
            raise FileNotFoundError(f"no stored weights {key}")
        folder = self.path(key)
        for name, (_, digest) in body["files"].items():
            if _sha256(folder / name) != digest:
                raise CorruptWeights(f"{folder / name}: its sha256 is not the manifest's")
        self.touch(key)
        return folder

    def put(self, key: str, src: str | os.PathLike, meta: dict[str, Any]) -> Path:
        """Store the files of the folder ``src`` under ``key`` (moved, not copied: ``src`` is a scratch
        folder the caller made); ``meta`` (what made them: transform, recipe, steps, parent) goes into
        the manifest. A key already stored is kept as it is."""
        if self.read_only:
            raise OSError(f"the cache {self.root} is read-only: cannot store trained weights {key}")
        dest = self.path(key)
        if self._here(key):
            return dest
        src = Path(src)
        names = sorted(p.name for p in src.iterdir() if p.is_file() and not p.is_symlink())
        refused = [n for n in names if not ALLOWED.fullmatch(n) or n == MANIFEST]
        if refused:
            raise ValueError(f"weights folder {src}: files the store does not keep: {', '.join(refused)}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        inside(self.root, dest.parent)
        tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=dest.parent))
        try:
            files = {}
            for n in names:
                shutil.move(str(src / n), str(tmp / n))
                files[n] = [(tmp / n).stat().st_size, _sha256(tmp / n)]
            body = {"format": FORMAT, "key": key, "files": files, "written_at": time.time(), **meta}
            body["checksum"] = _manifest_digest(body)
            with open(tmp / MANIFEST, "w") as f:
                json.dump(body, f, indent=1, sort_keys=True, default=str)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o755)
            try:
                os.rename(tmp, dest)
            except OSError:
                if self._here(key):  # another process stored the same key first: theirs stands
                    return dest
                raise
            tmp = None
        except OSError as e:
            raise write_error(dest, e) from e
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def touch(self, key: str) -> None:
        """Mark a use (prune removes folders unused since a cutoff)."""
        if not self.read_only:
            try:
                os.utime(self.path(key) / MANIFEST)
            except OSError:
                pass

    def nbytes(self, folder: Path) -> int:
        return sum(p.lstat().st_size for p in folder.iterdir() if p.is_file())

    def survey(self) -> Iterator[tuple[Path, str, "dict | str"]]:
        """(folder, "ok" | "corrupt", manifest or why) for every stored folder; sizes checked, not digests."""
        for folder in self.entries():
            try:
                body = self.manifest(folder.name)
                yield folder, "ok", body if body is not None else "no manifest"
            except (CorruptWeights, OSError) as e:
                yield folder, "corrupt", str(e)

    def verify(self) -> list[str]:
        """``"path: why"`` for each stored folder that fails: manifest, sizes, every file's sha256."""
        bad = []
        for folder in self.entries():
            try:
                if self.manifest(folder.name) is None:
                    bad.append(f"{folder}: no manifest (an interrupted write?)")
                    continue
                for name, (_, digest) in self.manifest(folder.name)["files"].items():
                    if _sha256(folder / name) != digest:
                        raise CorruptWeights(f"{folder / name}: its sha256 is not the manifest's")
            except (CorruptWeights, OSError) as e:
                bad.append(str(e))
        return bad

    def remove(self, folder: Path) -> int:
        """Delete one stored folder (its known files, then the folder); returns the files removed."""
        n = 0
        for p in folder.iterdir():
            if not p.is_symlink() and p.is_file() and (ALLOWED.fullmatch(p.name) or p.name == MANIFEST):
                p.unlink()
                n += 1
        try:
            folder.rmdir()
        except OSError:
            pass
        return n

    def prune(self, cutoff: float) -> int:
        """Remove folders whose manifest was last used before ``cutoff`` (and damaged ones older than it)."""
        n = 0
        for folder in list(self.entries()):
            m = folder / MANIFEST
            when = m.lstat().st_mtime if m.is_file() else folder.lstat().st_mtime
            if when < cutoff:
                self.remove(folder)
                n += 1
        return n

    def sweep(self, max_age_s: float) -> int:
        """Temporary folders a killed writer left (older than ``max_age_s``)."""
        n, cutoff = 0, time.time() - max_age_s
        if not self.top.is_dir():
            return 0
        for sub in self.top.iterdir():
            if sub.is_dir() and not sub.is_symlink():
                for d in sub.iterdir():
                    if d.name.startswith(TMP_PREFIX) and d.is_dir() and not d.is_symlink() and d.lstat().st_mtime < cutoff:
                        shutil.rmtree(d, ignore_errors=True)
                        n += 1
        return n

    def copy_into(self, other: "WeightStore", folder: Path) -> bool:
        """Copy one checked folder of this store into ``other`` (cache merge); False when ``other``
        has it already. A folder that fails its checks raises :class:`CorruptWeights`."""
        key = folder.name
        if other._here(key):  # stored there (a layer under it does not count: merge copies for good)
            return False
        src = self.checked(key)
        body = self.manifest(key) or {}
        meta = {k: v for k, v in body.items() if k not in ("format", "key", "files", "written_at", "checksum")}
        scratch = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=other.root))
        try:
            for name in body.get("files", {}):
                shutil.copyfile(src / name, scratch / name)
            other.put(key, scratch, meta)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return True


_active: ContextVar["WeightStore | None"] = ContextVar("evaldag_weights", default=None)


def active_weights() -> "WeightStore | None":
    """The running cache's weights store (inside :meth:`WeightStore.active`), else None."""
    return _active.get()


def describe(body: dict) -> str:
    """One line for ``cache ls``: what made a stored folder (the attack as written, else its parameters)."""
    what = body.get("transform", "weights")
    shown = body.get("spec") or f"{what}:" + ",".join(f"{k}={v}" for k, v in (body.get("params") or {}).items())
    steps = body.get("steps")
    return str(shown) + (f" ({steps} steps)" if steps is not None else "") + " [weights]"


__all__ = ["FOLDER", "MANIFEST", "CorruptWeights", "WeightStore", "active_weights", "describe"]
