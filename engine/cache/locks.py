"""Node locks that say who holds them: a waiter is never left waiting in silence.

One file lock per node being computed (``locks/<fp[:2]>/<fp>.lock``, filelock's
``flock``), so two processes never compute one node twice. Such a lock dies with its
process, so a killed holder never blocks anyone; a *stopped* one (Ctrl-Z, SIGSTOP, a
debugger) holds it for as long as it stays stopped. So the holder writes a record beside
the lock (``<fp>.holder``: pid, host, since when; filelock truncates the lock file itself
on every attempt, so the record cannot live in it), and a waiter reads it: after
:data:`NOTICE_S` it says once what it waits for and whose lock it is (and whether that
process is stopped, or gone from this host), then again every :data:`REPEAT_S`;
``timeout`` (``--lock-timeout``) ends the wait with :class:`LockTimeout`, one line.

A lock is an optimisation, never the guarantee: every entry is a whole file renamed into
place under a name its content decides, so two processes computing one node both write
the same entry. Where locking fails (another user's lock file, ``ENOLCK`` on a shared file
system without a lock manager) a process goes on unguarded; where it silently does not
work across hosts (NFS), two hosts may compute one node twice, nothing worse.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock, Timeout

from .files import inside

NOTICE_S = 5.0  # a lock taken by a live process is released within a node's compute time
REPEAT_S = 60.0


class LockTimeout(TimeoutError):
    """A node's lock was not released within ``--lock-timeout`` seconds (the text is one line)."""


class NodeLock:
    """A node's file lock plus its holder record; reentrant like filelock's."""

    def __init__(self, path: Path, root: Path):
        self.path, self.root = path, root
        self.record = path.with_suffix(".holder")
        self._lock = FileLock(str(path))
        self.unheld = 0  # acquisitions that found the lock file unopenable (see acquire)
        self.doing = ""  # what the holder computes (node, model), for a waiter's line

    def acquire(self, timeout: float = -1) -> "NodeLock":
        try:
            self._lock.acquire(timeout=timeout)  # filelock.Timeout when another process holds it
        except Timeout:
            raise
        except OSError:  # another user's lock file (umask 077), ENOLCK on a shared file system: go on
            self.unheld += 1  # unguarded: at worst both compute the node; each write is atomic
            return self
        if self._lock.lock_counter == 1:
            self._write_record()
        return self

    def _write_record(self) -> None:
        """pid, host, since: no fsync (a courtesy to waiters, not data), no link followed."""
        data = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                           **({"doing": self.doing[:500]} if self.doing else {})}).encode()
        try:
            inside(self.root, self.record)
            fd = os.open(self.record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError:  # a link (LinkRefused), another user's record: the lock is what guards
            pass

    def release(self) -> None:
        if self.unheld:
            self.unheld -= 1
            return
        if self._lock.lock_counter == 1:  # the outermost release: the record goes before the lock
            try:
                self.record.unlink()
            except OSError:
                pass
        self._lock.release()

    def __enter__(self) -> "NodeLock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def holder(self) -> str:
        """Who holds the lock, as far as its record says: pid, host, since when, stopped or gone."""
        try:
            rec = json.loads(self.record.read_bytes()[:4096])
            pid, host, since = int(rec["pid"]), str(rec["host"]), float(rec["since"])
        except (OSError, ValueError, TypeError, KeyError):
            return "lock held by another process, which left no record of itself"
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(since))
        text = f"lock held by pid {pid} on {host} since {when}"
        if isinstance(rec.get("doing"), str) and rec["doing"]:
            text += f", computing {rec['doing']}"
        if host == socket.gethostname():
            state = _process_state(pid)
            if state is None:
                text += "; no such process here any more, so another process holds it now"
            elif state in "Tt":
                text += f"; that process is stopped: `kill -CONT {pid}` resumes it"
        return text


def _process_state(pid: int) -> str | None:
    """The state letter of ``pid`` on this host (``T``: stopped), ``"?"`` if unknown, None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass
    return "?"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def wait(lock: "NodeLock | Any", what: str, timeout: float | None = None,
         say: Callable[[str], None] = _stderr) -> "NodeLock | Any":
    """Acquire ``lock`` for node ``what``, saying why after :data:`NOTICE_S`; :class:`LockTimeout` after ``timeout`` s."""
    if not isinstance(lock, NodeLock):  # a read-only store's lock: nothing to wait for
        return lock.acquire()
    start, notice = time.monotonic(), NOTICE_S
    while True:
        elapsed = time.monotonic() - start
        step = notice - elapsed if timeout is None else min(notice, timeout) - elapsed
        try:
            return lock.acquire(timeout=max(step, 0.0))
        except Timeout:
            pass
        elapsed = time.monotonic() - start
        if timeout is not None and elapsed >= timeout:
            raise LockTimeout(f"gave up waiting for node {what} after {timeout:g} s ({lock.holder()}); what was "
                              "computed is stored, a rerun goes on from there")
        if elapsed >= notice:
            say(f"evaldag: waiting for node {what} ({lock.holder()})")
            notice += REPEAT_S
