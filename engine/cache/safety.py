"""What keeps ``evaldag cache clear`` and ``prune`` inside the cache: a root marker and a walk of known entries.

A cache root carries ``evaldag-cache.json`` (``{"format": 1}``), written when a run first
uses it. ``clear`` refuses a folder without it, and removes only the files the cache
writes, by their known names (node objects, locks, history, the request database, the
file-hash memo, temp files), never following a symbolic link and never leaving the
root; anything else in the folder is left and counted.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .files import TMP_PREFIX

MARKER = "evaldag-cache.json"
FORMAT = 1

_HEX = re.compile(r"[0-9a-f]+")
_SQLITE = ("requests.sqlite", "requests.sqlite-wal", "requests.sqlite-shm", "requests.sqlite-journal")
_MEMO = ("filehash.json", "filehash.json.lock")


class NotACache(Exception):
    """A folder that the cache did not create (no marker): it is never cleared or pruned."""


class ReadOnlyCache(OSError):
    """Work that would have to be written into a cache this process cannot write."""


def writable(root: Path) -> bool:
    """Whether this process can write under ``root`` (or create it): False on a read-only
    mount or a folder without write permission, which makes the cache read-only."""
    where = root
    while not where.exists() and where != where.parent:
        where = where.parent
    return where.is_dir() and os.access(where, os.W_OK | os.X_OK)


def write_marker(root: Path) -> None:
    """Mark ``root`` as a cache (creating it). A read-only root is left unmarked, silently."""
    marker = root / MARKER
    if marker.is_file():
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"format": FORMAT, "what": "an evaldag cache; `evaldag cache clear` removes its entries"}))
    except OSError:
        pass


def require_marker(root: Path) -> None:
    if root.is_symlink() or not root.is_dir():
        raise NotACache(f"{root} is not a cache folder")
    if not (root / MARKER).is_file():
        raise NotACache(f"{root} has no {MARKER}: it is not a folder evaldag made as a cache (or one made before "
                        "evaldag marked its caches: run a benchmark with this --cache-dir once to mark it); nothing removed")


def _file(p: Path) -> bool:
    """A regular file, reached without a symbolic link at the last step."""
    return not p.is_symlink() and p.is_file()


def _dir(p: Path) -> bool:
    return not p.is_symlink() and p.is_dir()


def _entries(root: Path):
    """The files the cache writes under ``root``, by name; directories to remove after them."""
    files: list[Path] = []
    dirs: list[Path] = []
    objects, locks, history = root / "objects", root / "locks", root / "history"
    for top, suffixes in ((objects, (".safetensors",)), (locks, (".lock",))):
        if not _dir(top):
            continue
        for sub in top.iterdir():
            if not (_dir(sub) and len(sub.name) == 2 and _HEX.fullmatch(sub.name)):
                continue
            for p in sub.iterdir():
                stem = p.name.split(".", 1)[0]
                if _file(p) and (p.name.startswith(TMP_PREFIX) or (p.suffix in suffixes and _HEX.fullmatch(stem))):
                    files.append(p)
            dirs.append(sub)
        dirs.append(top)
    if _dir(history):
        files += [p for p in history.iterdir() if _file(p) and (p.name.startswith(TMP_PREFIX) or
                                                                (p.suffix == ".json" and _HEX.fullmatch(p.stem)))]
        dirs.append(history)
    files += [root / n for n in _SQLITE + _MEMO if _file(root / n)]
    files += [p for p in root.iterdir() if _file(p) and p.name.startswith(TMP_PREFIX)]
    return files, dirs


def clear_entries(root: Path) -> tuple[int, list[Path]]:
    """Remove the cache's own files under a marked ``root``; returns (files removed, paths left)."""
    require_marker(root)
    files, dirs = _entries(root)
    for p in files:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
    for d in dirs:
        try:
            d.rmdir()  # only when empty: a folder holding anything else stays
        except OSError:
            pass
    left = []  # what the cache did not write: files and links (os.walk does not follow links)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        left += [here / n for n in filenames if here / n != root / MARKER]
        left += [here / n for n in dirnames if (here / n).is_symlink()]
    if not left:
        (root / MARKER).unlink()
        try:
            root.rmdir()
        except OSError:
            pass
    return len(files), left


__all__ = ["MARKER", "NotACache", "ReadOnlyCache", "clear_entries", "require_marker", "writable", "write_marker"]
