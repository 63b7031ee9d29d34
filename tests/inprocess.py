"""The ``evaldag`` command run in the test's own process: its entry point with stdout, stderr
and warnings captured, returned as a ``CompletedProcess``. A fresh process per run costs ~10 s
of torch and transformers imports on this machine; tests that run the CLI dozens of times use
this, tests of the process itself (signals, exit codes of the console script) do not."""

from __future__ import annotations

import contextlib
import io
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
