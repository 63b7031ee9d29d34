"""What keeps the cache inside its folder: a root marker and a walk of known entries.

A cache root carries ``evaldag-cache.json`` (``{"format": 1}``), written when a run first
uses it. A run adopts only a folder that is marked, new or empty (:func:`claim_root`):
``--cache-dir ~`` or ``--cache-dir ""`` (an unset variable: the working directory) would
otherwise become a cache whose temporaries are swept and whose entries ``clear`` removes;
``--init-cache`` (``run(init_cache=True)``) adopts a non-empty folder on purpose.
``clear``, ``prune`` and the read-only commands refuse a folder without the marker.
``clear`` removes only the files the cache writes, by their known names (node objects,
locks and their holder records, history, the request database, the file-hash memo,
temp files), never following a symbolic link and never leaving the root; anything else
in the folder is left and counted, and so are entries it must leave alone (a newer
evaldag's format, or unreadable to this user).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .codec import leave_reason
from .files import TMP_PREFIX, default_cache_dir

MARKER = "evaldag-cache.json"
FORMAT = 1

_HEX = re.compile(r"[0-9a-f]+")
_SQLITE = tuple(f"requests.sqlite{m}{s}" for m in ("", ".migrated") for s in ("", "-wal", "-shm", "-journal"))
_BATCH = re.compile(r"[0-9a-f]{64}\.batch")  # batches.py
_INDEX = re.compile(r"requests-[\w.-]+\.sqlite(-wal|-shm|-journal)?")  # requests.py, one per host
_HOSTFILE = re.compile(r"[\w.-]+\.json(\.lock)?")  # filehash/<host>.json, shards/<sweep>/<record>.json
_MEMO = ("filehash.json", "filehash.json.lock")
_WEIGHT_FILE = re.compile(r"[\w.-]+\.(safetensors|json|txt|model|jinja)")  # weights.py ALLOWED


class NotACache(ValueError):
    """A folder that the cache did not create (no marker), or no folder at all (an empty path):
    it is never adopted, swept, cleared, pruned or inspected."""


class ReadOnlyCache(OSError):
    """Work that would have to be written into a cache this process cannot write."""


def writable(root: Path) -> bool:
    """Whether this process can write under ``root`` (or create it): False on a read-only
    mount or a folder without write permission, which makes the cache read-only."""
    where = root
    while not where.exists() and where != where.parent:
        where = where.parent
    return where.is_dir() and os.access(where, os.W_OK | os.X_OK)


def cache_root(root: "str | os.PathLike | None") -> Path:
    """The folder a cache lives in: ``root``, else ``$EVALDAG_CACHE_DIR``, else the user cache dir.
    An empty path (``--cache-dir "$UNSET"``) is refused, never read as the working directory."""
    if root is None:
        try:
            return default_cache_dir()
        except ValueError as e:
            raise NotACache(str(e)) from None
    if not str(root).strip():
        raise NotACache("the cache folder is an empty path (an unset variable?): give a folder, or leave it out "
                        "for the default cache")
    return Path(root).expanduser()


def root_state(root: Path) -> str:
    """``"marked"``, ``"new"`` (absent or empty), ``"file"`` or ``"foreign"`` (holds things, no marker)."""
    if (root / MARKER).is_file():
        return "marked"
    if not root.exists():
        return "new"
    if not root.is_dir():
        return "file"
    try:
        if not any(root.iterdir()):
            return "new"
    except OSError:
        return "foreign"
    # Another process may have marked and filled the folder since the first look (the ranks of a
    # job starting together on a new cache: one refused it as foreign and the job hung). The
    # marker is written before anything else, so a folder with contents and a marker is a cache.
    return "marked" if (root / MARKER).is_file() else "foreign"


def claim_root(root: Path, *, init: bool = False, read_only: bool = False, what: str = "--cache-dir") -> None:
    """Before a run uses ``root``: refuse a file, or a non-empty folder without the marker (unless
    ``init``); mark it otherwise (a read-only root is used as it is)."""
    state = root_state(root)
    if state == "file":
        raise NotACache(f"{what} {root}: a file, not a folder")
    if state == "foreign" and not init:
        raise NotACache(f"{what} {root}: the folder is not empty and has no {MARKER}, so it is not an evaldag cache; "
                        "give a new or empty folder, or pass --init-cache to make this one a cache (its "
                        f"{TMP_PREFIX}* temporaries are then swept and `evaldag cache clear` removes its entries)")
    if not read_only:
        write_marker(root)


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
                        "evaldag marked its caches: `evaldag run ... --cache-dir` with --init-cache marks it); nothing "
                        "removed or read")


_RUN = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{8}\.json")  # a run record (engine/runlog.py NAME)


def _file(p: Path) -> bool:
    """A regular file, reached without a symbolic link at the last step."""
    return not p.is_symlink() and p.is_file()


def _dir(p: Path) -> bool:
    return not p.is_symlink() and p.is_dir()


def _entries(root: Path, kept: list[str] | None = None):
    """The files the cache writes under ``root``, by name; directories to remove after them.
    Node entries a newer evaldag wrote, or this user cannot read, are left (``kept``: why)."""
    files: list[Path] = []
    dirs: list[Path] = []
    objects, locks, history = root / "objects", root / "locks", root / "history"
    for top, suffixes in ((objects, (".safetensors",)), (locks, (".lock", ".holder"))):
        if not _dir(top):
            continue
        for sub in top.iterdir():
            if not (_dir(sub) and len(sub.name) == 2 and _HEX.fullmatch(sub.name)):
                continue
            try:
                names = list(sub.iterdir())
            except OSError as e:  # another user's folder (umask 077): not ours to empty
                if kept is not None:
                    kept.append(f"{sub}: unreadable folder ({e.strerror})")
                continue
            for p in names:
                stem = p.name.split(".", 1)[0]
                if _file(p) and (p.name.startswith(TMP_PREFIX) or (p.suffix in suffixes and _HEX.fullmatch(stem))):
                    why = leave_reason(p) if p.suffix == ".safetensors" and top == objects else None
                    if why is None:
                        files.append(p)
                    elif kept is not None:
                        kept.append(f"{p}: {why}")
            dirs.append(sub)
        dirs.append(top)
    for top in (history, root / "aliases"):  # aliases: cache/aliases.py, <folder fingerprint>.json
        if _dir(top):
            files += [p for p in top.iterdir() if _file(p) and (p.name.startswith(TMP_PREFIX) or
                                                                (p.suffix == ".json" and _HEX.fullmatch(p.stem)))]
            dirs.append(top)
    req = root / "requests"  # batches.py: requests/<32 hex>/<64 hex>.batch
    if _dir(req):
        for sub in req.iterdir():
            if _dir(sub) and len(sub.name) == 32 and _HEX.fullmatch(sub.name):
                files += [p for p in sub.iterdir() if _file(p) and (p.name.startswith(TMP_PREFIX) or _BATCH.fullmatch(p.name))]
                dirs.append(sub)
        dirs.append(req)
    for top, names in ((root / "index", _INDEX), (root / "filehash", _HOSTFILE)):
        if _dir(top):
            files += [p for p in top.iterdir() if _file(p) and (p.name.startswith(TMP_PREFIX) or names.fullmatch(p.name))]
            dirs.append(top)
    shards = root / "shards"  # shards.py: shards/<sweep id>/<record>.json
    if _dir(shards):
        for sub in shards.iterdir():
            if _dir(sub) and _HEX.fullmatch(sub.name):
                files += [p for p in sub.iterdir() if _file(p) and (p.name.startswith(TMP_PREFIX) or _HOSTFILE.fullmatch(p.name))]
                dirs.append(sub)
        dirs.append(shards)
    weights = root / "weights"  # weights.py: weights/<ab>/<64 hex>/<known files>, and temporary folders
    if _dir(weights):
        for sub in weights.iterdir():
            if not (_dir(sub) and len(sub.name) == 2 and _HEX.fullmatch(sub.name)):
                continue
            for d in sub.iterdir():
                if _dir(d) and (d.name.startswith(TMP_PREFIX) or (len(d.name) == 64 and _HEX.fullmatch(d.name))):
                    files += [p for p in d.iterdir() if _file(p) and _WEIGHT_FILE.fullmatch(p.name)]
                    dirs.append(d)
            dirs.append(sub)
        dirs.append(weights)
    runs = root / "runs"  # engine/runlog.py's records of each run
    if _dir(runs):
        files += [p for p in runs.iterdir() if _file(p) and (p.name.startswith(TMP_PREFIX) or _RUN.fullmatch(p.name))]
        dirs.append(runs)
    files += [root / n for n in _SQLITE + _MEMO if _file(root / n)]
    files += [p for p in root.iterdir() if _file(p) and p.name.startswith(TMP_PREFIX)]
    return files, dirs


def clear_entries(root: Path, kept: list[str] | None = None) -> tuple[int, list[Path]]:
    """Remove the cache's own files under a marked ``root``; returns (files removed, paths left).
    Entries left alone (newer format, unreadable) are among the paths left, and named in ``kept``."""
    require_marker(root)
    files, dirs = _entries(root, kept)
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


__all__ = ["MARKER", "NotACache", "ReadOnlyCache", "cache_root", "claim_root", "clear_entries", "require_marker",
           "root_state", "writable", "write_marker"]
