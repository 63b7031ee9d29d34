"""File-level helpers of the cache: where it lives and how a file is written atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

TMP_PREFIX = ".tmp-"
_UMASK = os.umask(0)
os.umask(_UMASK)


def default_cache_dir() -> Path:
    """``EVALDAG_CACHE_DIR``, else the user cache dir (``~/.cache/evaldag`` on Linux)."""
    env = os.environ.get("EVALDAG_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir  # only needed when no folder was given

    return Path(user_cache_dir("evaldag", appauthor=False))


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a unique temp file in the same folder, fsync, rename.

    A reader sees the old file or the new one, never a part; on any error the temp file
    is removed and the old file is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TMP_PREFIX, suffix=path.suffix)
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
