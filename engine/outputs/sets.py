"""Publishing a run's files as one set, in one atomic step (the layout is in ``outfolder.py``).

Why links: users and open-unlearning read ``OUT/TOFU_EVAL.json`` as a plain path, and
POSIX has no rename of several files at once. So the files live in a fresh folder
``OUT/.evaldag/sets/<id>/``, the names in OUT are links that never change
(``NAME -> .evaldag/current/NAME``), and publishing is one ``rename`` of the link
``current``: at every instant each name reads from the old set or from the new one,
never a mix, and a name the new set lacks reads as absent (item 4: another run's files
never show beside this run's). SIGINT/SIGTERM arriving during that step are held until
it is over and then reported (:class:`Interrupted` says whether the new set is out).

A stage folder carries a mark (pid, host) until it is published; stages of killed runs
(dead pid, or older than a day) and sets older than the previous one are swept at the
next publish, under the folder's lock. A name in OUT that evaldag did not write as that
kind of output is never replaced (:func:`check_names`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

from ..cache.files import TMP_MAX_AGE_S, TMP_PREFIX
from ..outfolder import CURRENT, META, SETS, is_evaldag_run_json, is_our_link, is_report, link_target

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

STAGE_MARK = ".evaldag-stage"  # in a set folder until it is published: {"pid", "host", "started"}
STAGE_MAX_AGE_S = 86400.0  # a marked stage of another host (or a reused pid) is swept after a day
_OUR_JSON = re.compile(r"^[A-Z][A-Z0-9_]*_[A-Z]+\.json$")  # TOFU_EVAL.json, WEAT_LOOKUP.json, RUN_SUMMARY.json


class Interrupted(BaseException):
    """SIGINT/SIGTERM ended the command; ``published`` says whether the new set was out first.

    A ``BaseException``, as ``KeyboardInterrupt`` is: raised from a signal handler anywhere, it
    must pass every ``except Exception`` that turns a node's error into a failed node (a SIGTERM
    inside a model stage was recorded as that stage's failure and the run went on)."""

    def __init__(self, signum: int, published: bool = False) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.published = signum, published


class NotOurs(ValueError):
    """A name the set would publish is a file evaldag did not write as that kind of output."""


def new_stage(out: Path) -> Path:
    """A fresh, marked set folder under ``OUT/.evaldag/sets/``.

    It appears there with its mark already inside (made beside ``sets/`` under a temporary
    name, then renamed in): a concurrent run's :func:`sweep` takes an unmarked folder in
    ``sets/`` for an old published set, and removed a stage caught between its mkdir and
    its mark (four concurrent writers of one OUT: one failed with ENOENT)."""
    sets = out / META / SETS
    sets.mkdir(parents=True, exist_ok=True)
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp = out / META / f"{TMP_PREFIX}stage-{name}"
    tmp.mkdir()
    (tmp / STAGE_MARK).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}))
    stage = sets / name
    os.rename(tmp, stage)
    return stage


def replaceable(p: Path) -> bool:
    """May a set publish the name ``p``? Yes when absent, when it is our stable link, or when
    an older evaldag wrote it there as a plain file of that kind."""
    if not os.path.lexists(p):
        return True
    if is_our_link(p):
        return True
    if p.is_symlink() or not p.is_file():
        return False
    return _older_evaldag(p)


def _older_evaldag(p: Path) -> bool:
    """A plain file an older evaldag (one set = plain files) wrote as output of that name."""
    if p.name == "report.html":
        return is_report(p)
    if p.name == "run.json":
        return is_evaldag_run_json(p)
    return bool(_OUR_JSON.match(p.name)) and is_evaldag_run_json(p.parent / "run.json")


def check_names(out: Path, names: Iterable[str]) -> None:
    """Refuse (one line) to publish over a file evaldag did not write as that kind of output."""
    for name in names:
        p = out / name
        if not replaceable(p):
            what = "a report evaldag wrote" if name == "report.html" else "an output of an evaldag run"
            raise NotOurs(f"--out {out}: {p} is not {what}; refusing to replace it (choose another --out)")


def publish(stage: Path, out: Path) -> None:
    """Make ``stage`` OUT's current set in one rename; SIGINT/SIGTERM wait until it is done."""
    names = sorted(p.name for p in stage.iterdir() if p.name != STAGE_MARK)
    got: list[int] = []
    try:
        _switch(stage, out, names, got)
    except Exception:
        if got:  # a refusal or a full disk, and a signal held meanwhile: the old set stays, and we say so
            raise Interrupted(got[0]) from None
        raise
    if got:
        raise Interrupted(got[0], published=True)


def _switch(stage: Path, out: Path, names: list[str], got: list[int]) -> None:
    with _locked(out), _held_signals(got):
        check_names(out, names)
        for n in names:
            with open(stage / n, "rb") as f:
                os.fsync(f.fileno())
        (stage / STAGE_MARK).unlink()
        _fsync_dir(stage)
        previous = _current(out)
        if previous is None:
            previous = _adopt_older(out)
        for n in names:  # new names dangle (read as absent) until `current` moves
            _ensure_link(out / n)
        _point_current(out, stage)  # the one atomic step; nothing after it may undo the publish
        with contextlib.suppress(OSError):
            for p in list(out.iterdir()):  # names the new set lacks: already absent, now tidied away
                if p.name not in names and is_our_link(p):
                    p.unlink()
            sweep(out, keep={stage.name, *([previous.name] if previous else [])})


def _current(out: Path) -> Path | None:
    cur = out / META / CURRENT
    return Path(os.path.realpath(cur)) if cur.is_symlink() and cur.is_dir() else None


def _point_current(out: Path, stage: Path) -> None:
    meta = out / META
    tmp = meta / f"{TMP_PREFIX}current-{os.getpid()}-{secrets.token_hex(4)}"
    os.symlink(f"{SETS}/{stage.name}", tmp)
    os.replace(tmp, meta / CURRENT)
    _fsync_dir(meta)


def _ensure_link(p: Path) -> None:
    if is_our_link(p):
        return
    tmp = p.parent / f"{TMP_PREFIX}link-{os.getpid()}-{secrets.token_hex(4)}"
    os.symlink(link_target(p.name), tmp)
    os.replace(tmp, p)  # replaces only what check_names allowed (absent, or an older evaldag's file)


def _adopt_older(out: Path) -> Path | None:
    """Plain files of an older evaldag in OUT become a set first, so that they too switch
    in the one rename (each becomes a link to an identical copy: no instant shows a mix)."""
    older = [p for p in sorted(out.iterdir()) if not p.is_symlink() and p.is_file() and _older_evaldag(p)]
    if not older:
        return None
    adopted = new_stage(out)
    for p in older:
        shutil.copy2(p, adopted / p.name)
    (adopted / STAGE_MARK).unlink()
    _point_current(out, adopted)
    for p in older:
        _ensure_link(p)
    return adopted


def _pid_dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, another user's
        return False
    return False


def sweep(out: Path, keep: set[str] = frozenset()) -> int:
    """Remove what killed runs left: marked stages whose pid is dead (or a day old), published
    sets other than ``keep`` and current, stray link temporaries, and an older evaldag's
    ``OUT/.tmp-out-*`` folders over an hour old. Returns how many were removed."""
    sets, n, now = out / META / SETS, 0, time.time()
    cur = _current(out)
    keep = set(keep) | ({cur.name} if cur else set())
    for d in sorted(sets.iterdir()) if sets.is_dir() else []:
        if d.name in keep or d.is_symlink() or not d.is_dir():
            continue
        mark = d / STAGE_MARK
        if mark.exists():
            try:
                info = json.loads(mark.read_text())
                mine = info.get("host") == socket.gethostname()
                gone = (mine and _pid_dead(int(info["pid"]))) or now - float(info["started"]) > STAGE_MAX_AGE_S
            except (OSError, ValueError, KeyError, TypeError):
                gone = now - d.lstat().st_mtime > STAGE_MAX_AGE_S
            if not gone:
                continue
        shutil.rmtree(d, ignore_errors=True)
        n += 1
    legacy = [p for p in out.glob(".tmp-out-*") if _legacy_stage(p)]
    for p in [*(out / META).glob(TMP_PREFIX + "*"), *out.glob(TMP_PREFIX + "link-*"), *out.glob(TMP_PREFIX + "out-*"), *legacy]:
        try:
            if now - p.lstat().st_mtime > TMP_MAX_AGE_S:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                n += 1
        except OSError:
            pass
    return n


def _legacy_stage(p: Path) -> bool:
    """An older evaldag's stage folder (``.tmp-out-*``, before temporaries carried the
    ``.evaldag-tmp-`` mark): a real folder holding nothing but the files a run writes, so a
    user's own ``.tmp-out-`` folder is never taken for one."""
    if p.is_symlink() or not p.is_dir():
        return False
    names = [c.name for c in p.iterdir()]
    return all(n == "run.json" or n == "report.html" or n.endswith(("_EVAL.json", "_SUMMARY.json", "_LOOKUP.json"))
               for n in names)


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _held_signals(got: list[int]) -> Iterator[None]:
    """SIGINT and SIGTERM are recorded in ``got``, not acted on, inside the block (main thread
    only: elsewhere Python cannot set handlers, and the block runs unprotected)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    old = {s: h for s, h in old.items() if h is not signal.SIG_IGN}  # ignored (nohup, `cmd &`) stays ignored
    for s in old:
        signal.signal(s, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on the folder itself (flock on its descriptor): no lock file is left behind."""
    if fcntl is None:  # not POSIX: publishing is not serialised
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
