"""The ``evaldag`` command run in the test's own process: its entry point with stdout, stderr
and warnings captured, returned as a ``CompletedProcess``. A fresh process per run costs ~10 s
of torch and transformers imports on this machine; tests that run the CLI dozens of times use
this, tests of the process itself (signals, exit codes of the console script) do not.
:func:`run_fresh` runs several commands in one new process, for what needs a process that has
not seen them yet (a metric file edited between two runs is imported once per process)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

from evaldag.engine import cli

EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    """``evaldag ARGS`` in this process: (exit code, stdout, stderr) as a subprocess would give them."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), warnings.catch_warnings():
        warnings.simplefilter("default")  # warnings to stderr, as the console script shows them
        warnings.showwarning = lambda m, c, f, n, file=None, line=None: stderr.write(warnings.formatwarning(m, c, f, n, line))
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as e:  # argparse's errors
            code = e.code if isinstance(e.code, int) else 1
    return subprocess.CompletedProcess([EVALDAG, *args], code, stdout.getvalue(), stderr.getvalue())


def run_fresh(*argvs: list[str], timeout: float = 900) -> list[subprocess.CompletedProcess]:
    """Several ``evaldag`` commands in ONE new process, one after another: what a file edited
    between two commands needs (a metric file is imported once per process), at the cost of one
    process start instead of one per command. Each command is captured as :func:`run_cli` does."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    argvs_text = json.dumps([[str(a) for a in args] for args in argvs])
    proc = subprocess.run([sys.executable, "-m", "tests.inprocess"], input=argvs_text, capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=Path(__file__).parents[1])
    if proc.returncode != 0:
        raise AssertionError(f"the driver process failed ({proc.returncode}): {proc.stderr}")
    return [subprocess.CompletedProcess([EVALDAG, *args], code, out, err)
            for args, (code, out, err) in zip(json.loads(argvs_text), json.loads(proc.stdout.splitlines()[-1]))]


if __name__ == "__main__":  # run_fresh's driver: the commands as JSON on stdin, their results as JSON on stdout's last line
    done = [run_cli(args) for args in json.loads(sys.stdin.read())]
    print(json.dumps([[d.returncode, d.stdout, d.stderr] for d in done]))
