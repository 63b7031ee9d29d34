"""Start the processes of a multi-process test job and wait for them, so that a hang or a
crash fails with each process's Python stacks instead of a bare timeout.

Each process writes to files (a rank blocked on a full pipe while the test waits for another
would hang the pair), runs in a session of its own (a torchrun agent is stopped with its
workers) and with ``PYTHONFAULTHANDLER=1``: a fatal signal (an abort in C++ teardown, a
segfault) prints every thread's Python stack. When the limit passes, every process still
running is sent SIGABRT (faulthandler prints where each thread stood), then killed, and the
test fails with each process's stderr tail: a hang in CI is then readable from CI's log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TAIL = 4000  # characters of each process's stderr in a failure message


@dataclass
class Done:
    """One finished process: exit code (negative: the signal), its stdout and stderr."""

    name: str
    code: int
    out: str
    err: str


def start(name: str, cmd: list[str], env: dict, logs: Path) -> subprocess.Popen:
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.out", "wb") as o, open(logs / f"{name}.err", "wb") as e:
        p = subprocess.Popen(cmd, env={**env, "PYTHONFAULTHANDLER": "1"}, stdout=o, stderr=e, start_new_session=True)
    p.log_name, p.logs = name, logs
    return p


def finish(procs: list[subprocess.Popen], limit_s: float) -> list[Done]:
    """Wait for every process; past ``limit_s`` (from now) stop the rest and fail the test."""
    deadline = time.monotonic() + limit_s
    late = []
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            late.append(p)
    if late:
        for p in late:
            _signal(p, signal.SIGABRT)  # faulthandler prints every thread's stack, then the process dies
        time.sleep(5)
        for p in procs:
            if p.poll() is None:
                _signal(p, signal.SIGKILL)
            p.wait()
        names = ", ".join(p.log_name for p in late)
        pytest.fail(f"{names} did not finish in {limit_s:.0f} s; each process's stderr (stacks at the limit):\n"
                    + tails(collect(procs)), pytrace=False)
    return collect(procs)


def collect(procs: list[subprocess.Popen]) -> list[Done]:
    return [Done(p.log_name, p.returncode, _read(p.logs / f"{p.log_name}.out"), _read(p.logs / f"{p.log_name}.err"))
            for p in procs]


def run(cmds: dict[str, list[str]], env: dict, logs: Path, limit_s: float) -> list[Done]:
    """Start every command (name -> argv) at once and wait for all of them."""
    return finish([start(n, c, env, logs) for n, c in cmds.items()], limit_s)


def ranks(argvs: list[list[str]], env: dict, logs: Path, limit_s: float) -> list[Done]:
    """One bare rank per argv (RANK/LOCAL_RANK/WORLD_SIZE set; MASTER_ADDR/PORT from ``env``)."""
    n = len(argvs)
    return finish([start(f"rank{r}", a, {**env, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n)}, logs)
                   for r, a in enumerate(argvs)], limit_s)


def tails(done: list[Done]) -> str:
    """Each process's exit code and stderr tail, for an assertion message."""
    return "\n".join(f"--- {d.name} (exit {d.code}):\n{d.err[-TAIL:]}" for d in done)


def _signal(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
