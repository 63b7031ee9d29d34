"""File-level rules of the cache: where it lives, atomic writes, no links, no stale temporaries.

* :func:`atomic_write`: a unique temp file in the target folder, fsync, rename. A full
  disk or any other error removes the temp file and raises :class:`CacheWriteError`,
  one line naming the file (and the bytes it needed).
* :func:`inside`: the cache never follows a link it did not create. Every path below the
  root is checked component by component; a symlink there raises :class:`LinkRefused`
  (callers warn and treat the entry as absent). The root itself may be a link: that is
  the user's choice of folder.
* :func:`sweep_temps`: temporaries left by a killed writer (older than
  :data:`TMP_MAX_AGE_S`; a live write takes seconds) are removed. Only names carrying
  evaldag's own mark (:data:`TMP_PREFIX`, ``.evaldag-tmp-``) are temporaries: a user's
  ``.tmp-editor-swap`` in a folder mistaken for a cache is never one.
"""

from __future__ import annotations

import errno
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Iterator

TMP_PREFIX = ".evaldag-tmp-"  # every temporary evaldag makes, and the only names its sweeps delete
TMP_MAX_AGE_S = 3600.0
_UMASK = os.umask(0)
os.umask(_UMASK)


class CacheWriteError(OSError):
    """A cache or output file could not be written (full disk, read-only, permissions).

    Its text is one line: ``cannot write PATH: WHY (N bytes needed)``.
    """

    def __str__(self) -> str:
        return str(self.strerror)


class LinkRefused(OSError):
    """A path inside the cache is a symbolic link the cache did not create."""


class LinkWarning(UserWarning):
    """A link inside the cache was refused (not read, written, pruned or followed)."""


def default_cache_dir() -> Path:
    """``EVALDAG_CACHE_DIR``, else the user cache dir (``~/.cache/evaldag`` on Linux)."""
    env = os.environ.get("EVALDAG_CACHE_DIR")
    if env is not None and not env.strip():  # set but empty: an unset variable, never "the working directory"
        raise ValueError("EVALDAG_CACHE_DIR is set but empty (an unset variable?): give it a folder, or unset it "
                         "for the default cache")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir  # only needed when no folder was given

    return Path(user_cache_dir("evaldag", appauthor=False))


def inside(root: Path, path: Path) -> Path:
    """``path`` (below ``root``) if no existing component between them is a symlink."""
    rel = path.relative_to(root)
    p = root
    for part in rel.parts:
        p = p / part
        if os.path.islink(p):
            raise LinkRefused(errno.ELOOP, "the cache does not follow links it did not create", str(p))
    return path


def refuse(e: LinkRefused, doing: str) -> None:
    """A LinkWarning naming the link (``.path``: a caller that counts refusals reads it)."""
    w = LinkWarning(f"{doing}: refused link {e.filename} (the cache never follows a link it did not create)")
    w.path = e.filename
    warnings.warn(w, stacklevel=3)


def write_error(path: Path, e: OSError, size: int | None = None) -> CacheWriteError:
    """One line: which file, why, how much was needed."""
    need = f" ({size} bytes needed)" if size is not None and e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return CacheWriteError(e.errno or 0, f"cannot write {path}: {e.strerror or e}{need}", str(path))


def atomic_write(path: str | os.PathLike, data: bytes, root: str | os.PathLike | None = None) -> None:
    """Write ``data`` to ``path`` through a unique temp file in the same folder, fsync, rename.

    A reader sees the old file or the new one, never a part. With ``root``, no component
    between it and ``path`` may be a link (:class:`LinkRefused`). On any error the temp
    file is removed, the old file is left as it was, and :class:`CacheWriteError` says why.
    """
    path = Path(path)
    if root is not None:
        inside(Path(root), path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if root is not None:
            inside(Path(root), path)  # mkdir follows links: check again now that the folders exist
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TMP_PREFIX, suffix=path.suffix)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a shared cache must be readable
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except LinkRefused:
        raise
    except OSError as e:
        raise write_error(path, e, len(data)) from e
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def is_temp(p: Path) -> bool:
    return p.name.startswith(TMP_PREFIX)


def walk_files(root: Path, top: Path, unlisted: list[Path] | None = None) -> Iterator[Path]:
    """Regular files below ``top`` without following links; each link met is warned about.
    Folders this user cannot list (another user's, umask 077) are added to ``unlisted``."""
    try:
        inside(root, top)
    except LinkRefused as e:
        refuse(e, "listing the cache")
        return
    if not top.is_dir():
        return
    def denied(e: OSError) -> None:
        if unlisted is not None and e.filename is not None:
            unlisted.append(Path(e.filename))

    for dirpath, dirnames, filenames in os.walk(top, followlinks=False, onerror=denied):
        for d in sorted(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                refuse(LinkRefused(errno.ELOOP, "link", os.path.join(dirpath, d)), "listing the cache")
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if os.path.islink(p):
                refuse(LinkRefused(errno.ELOOP, "link", str(p)), "listing the cache")
                continue
            yield p


def sweep_temps(root: Path, max_age_s: float = TMP_MAX_AGE_S) -> int:
    """Remove temporaries older than ``max_age_s`` below ``root`` (no link followed)."""
    cutoff = time.time() - max_age_s
    n = 0
    for sub in ("objects", "history", "requests", "index", "filehash", ""):
        top = root / sub if sub else root
        files = walk_files(root, top) if sub else (p for p in _listdir(root) if p.is_file() and not p.is_symlink())
        for p in files:
            if not is_temp(p):
                continue
            try:
                if p.lstat().st_mtime < cutoff:
                    p.unlink()
                    n += 1
            except OSError:
                pass
    return n


def _listdir(d: Path) -> list[Path]:
    try:
        return sorted(d.iterdir())
    except OSError:
        return []


def host_id() -> str:
    """This machine's name as a file-name part (``$EVALDAG_HOST`` overrides it): what is kept per
    host in a shared cache (the request index, the file-hash memo) is named by it."""
    name = os.environ.get("EVALDAG_HOST") or __import__("socket").gethostname() or "host"
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:100]
