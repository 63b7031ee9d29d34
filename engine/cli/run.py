"""``evaldag run BENCH [BENCH ...]``: parse the command line, then one call of the library.

The options and each benchmark's config are read once (``options.py``); the run or the
sweep is ``session_sweep.run_sweep`` (each run ``session.run_benchmarks``). What stays here
is the process's: ``--launcher torchrun`` replacing this process, joining the ranks torchrun
started, SIGTERM ending a run like Ctrl-C, and the one line an interrupt leaves.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from ..adapters.model_args import say_deprecated
from ..benchmark import Benchmark
from ..distributed import launch
from ..options import add_run_arguments, read
from ..outputs import Interrupted
from ..progress import hushed
from ..redact import redact_argv
from ..registry import BENCHMARKS
from ..session import error_line
from ..session_sweep import run_sweep


#: ``run --help`` / ``graph --help`` without a benchmark: where the model and data options are
BENCH_OPTIONS_HINT = ("Each benchmark adds its own options (--model, --data, --retain-model, --embeddings, "
                      "--generator, ...): name it to see them, e.g. `evaldag {cmd} tofu --help`.")


def add_parser(sub: argparse._SubParsersAction, benches: list[Benchmark]) -> argparse.ArgumentParser:
    r = sub.add_parser("run", help="run one or more benchmarks",
                       epilog=None if benches else BENCH_OPTIONS_HINT.format(cmd="run"))
    r.add_argument("benchmarks", nargs="*", default=[], help=f"benchmarks to run ({', '.join(BENCHMARKS.names())})")
    add_run_arguments(r, benches)
    return r


def cmd(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    if args.launcher == "torchrun":
        return launch.exec_torchrun(argv or [], nproc_per_node=args.nproc_per_node, nnodes=args.nnodes,
                                    rdzv_endpoint=args.rdzv_endpoint)
    benches = [BENCHMARKS.get(n) for n in args.benchmarks]
    try:
        # run.json names the command as typed (also when main() is called from Python), secrets masked
        parsed = read(args, benches, command=redact_argv(["evaldag", *(sys.argv[1:] if argv is None else argv)]))
    except (OSError, ValueError) as e:
        print(error_line(e, benches), file=sys.stderr)
        return 2
    try:
        group = launch.join()  # None unless torchrun started several ranks
    except launch.RankFailure as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    out = Path(parsed.options.out)
    old = term_raises()
    try:
        with hushed(parsed.options.quiet):  # --quiet: no lines about a server's retries either
            code = run_sweep(parsed.benches, parsed.configs, parsed.options, parsed.sweep, group)
        if code in (0, 1) and not parsed.options.quiet:  # after the run: an error stays its one line
            say_deprecated(args)
        return code
    except (KeyboardInterrupt, Interrupted) as e:  # one line saying what OUT now holds
        signum = getattr(e, "signum", signal.SIGINT)
        what = "published the new set in" if getattr(e, "published", False) else "kept the previous outputs in"
        if not getattr(e, "said", False):  # stopped before the outputs: the run said what it kept
            print(f"evaldag: interrupted ({signal.Signals(signum).name}): {what} {out}", file=sys.stderr)
        return 128 + signum
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
        if group is not None:
            group.close()


def term_raises() -> object:
    """SIGTERM ends a run like Ctrl-C does (cleanly, with one line), not by the default kill
    that would leave a half-written stage behind; returns the handler to restore."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    return signal.signal(signal.SIGTERM, raise_interrupted)
