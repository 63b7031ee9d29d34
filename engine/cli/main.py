"""The ``evaldag`` command line.

    evaldag run BENCH [BENCH ...] [opts]  run benchmarks (`evaldag list` shows them)
    evaldag graph BENCH | --run OUT_DIR   draw the plan of a benchmark, or a finished run
    evaldag report OUT_DIR [...]          rebuild report.html, several runs side by side
    evaldag list                          benchmarks (with their --metrics names) and metrics
    evaldag cache info|ls|runs|explain|verify|clear|prune
    evaldag export DIR [...] --csv|--jsonl|--parquet   the runs' metrics as one long table
    evaldag compare A B [--out FILE]      per-metric difference between two runs
    evaldag robustness OUT [--retain R]   R, Q, HM of each metric under attacks (ROBUSTNESS.json)
    evaldag metaeval --knows .. --not-knows ..   faithfulness and robustness of metrics (METAEVAL.json)
    evaldag demo                          (and any command registered under ``evaldag.commands``)

Benchmarks come from the ``evaldag.benchmarks`` entry points (:mod:`evaldag.engine.registry`);
only the ones a command names are imported, so a warm rerun of one benchmark never
imports another's data loaders. Commands from ``evaldag.commands`` are named from
their entry points and their module is imported only when that command runs (or for
``evaldag --help``, which shows their ``HELP``): ``evaldag run toy`` imports no demo, and
so no TOFU, and a broken command plugin breaks only itself.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from importlib.metadata import entry_points

from ..registry import BENCHMARKS
from ..adapters import vllm_engine
from ..option_owners import OptionClash
from ..options import Parser, glue_shard
from . import cache, compare, export, graph, list as list_cmd, metaeval, report, robustness, run

#: extra sub-commands: name -> a module with ``HELP``, ``add_arguments(parser)`` and ``main(args)``
COMMANDS_GROUP = "evaldag.commands"


def parser(benchmarks: list[str] | None = None, command: str | None = None, top_help: bool = False) -> argparse.ArgumentParser:
    """The parser; ``run`` and ``graph`` gain the options of each named benchmark.

    A registered command's module is loaded only when it is ``command`` (its options are
    needed) or for the top-level help (``top_help``: its ``HELP`` is shown); otherwise it
    is a bare sub-command named by its entry point.
    """
    benches = [BENCHMARKS.get(b) for b in benchmarks or []]
    p = Parser(prog="evaldag", description="Evaluate language models with metric graphs.")
    sub = p.add_subparsers(dest="cmd", required=True)
    run.add_parser(sub, benches)
    graph.add_parser(sub, benches)
    report.add_parser(sub)
    list_cmd.add_parser(sub)
    cache.add_parser(sub)
    export.add_parser(sub)
    compare.add_parser(sub)
    robustness.add_parser(sub)
    metaeval.add_parser(sub)
    for ep in entry_points(group=COMMANDS_GROUP):
        if ep.name == command or top_help:
            mod = ep.load()
            mod.add_arguments(sub.add_parser(ep.name, help=getattr(mod, "HELP", None)))
        else:
            sub.add_parser(ep.name, help=f"(from {ep.value})")
    return p


def _command_words(argv: list[str]) -> tuple[str | None, list[str]]:
    """The subcommand and the bare words right after it (benchmark names), before any option."""
    if not argv or argv[0].startswith("-"):
        return None, []
    named = []
    for w in argv[1:]:
        if w.startswith("-"):
            break
        named.append(w)
    return argv[0], named


def _description(name: str) -> str:
    try:
        return BENCHMARKS.get(name).description
    except Exception as e:  # a broken plugin is named with its error
        return f"(cannot be loaded: {type(e).__name__}: {e})"


def _leave_if_vllm_ran(code: int) -> None:
    """End a console process that ran an in-process vLLM engine here, without interpreter
    teardown: its outputs are written and its engine shut down, and what vLLM's threads leave
    for teardown aborted such a finished run twice in CI-like checks ("terminate called
    without an active exception", exit -6, no Python frame left) after it had written
    everything. Other runs end as usual."""
    if not vllm_engine.START_SECONDS:
        return
    vllm_engine.free(wait=False)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """The ``evaldag`` command. A closed stdout (``evaldag list | head -1``) ends it
    quietly. SIGPIPE stays ignored, as Python sets it: with the default action a rank
    whose peer died would be killed by its next socket write (exit -13, no message)
    instead of reporting the lost peer."""
    process = argv is None  # the console script: this process ends when main returns
    argv = list(sys.argv[1:] if argv is None else argv)
    old = run.term_raises() if argv[:1] == ["run"] else None  # from the start: loading plugins takes seconds
    try:
        code = _main(argv)
        sys.stdout.flush()
        if process:
            _leave_if_vllm_ran(code)
        if old is not None and process:  # a SIGTERM while Python tears down still gets its one line
            old = None
            signal.signal(signal.SIGTERM, lambda signum, frame: _late(signum, code))
        return code
    except KeyboardInterrupt:  # before a run started (a run says what it kept): no traceback
        print("evaldag: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own exit flush must not fail again
        return 141  # what a shell reports for a process ended by SIGPIPE
    except (KeyboardInterrupt, run.Interrupted) as e:  # before `run` had parsed its options: nothing written
        signum = getattr(e, "signum", signal.SIGINT)
        print(f"evaldag: interrupted ({signal.Signals(signum).name}): before the run started, nothing was written",
              file=sys.stderr)
        return 128 + signum
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _late(signum: int, code: int) -> None:
    """SIGTERM after the run returned (interpreter teardown): its outputs are already as it left them."""
    print(f"evaldag: interrupted ({signal.Signals(signum).name}): after the run had finished (exit {code}); "
          "its outputs are complete", file=sys.stderr)
    sys.stderr.flush()
    os._exit(128 + signum)


def _main(argv: list[str]) -> int:
    # transformers prints a "Loading weights" bar per checkpoint; our own bar is --progress
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # benchmark options are added once we know which benchmarks were named, read from the
    # words after the command (so `evaldag run tofu --help` lists TOFU's options too)
    cmd, named = _command_words(argv)
    if cmd == "run" and not named and not {"-h", "--help"} & set(argv):
        print("evaldag: error: name the benchmarks to run: `evaldag run NAME [NAME ...]`; known:", file=sys.stderr)
        for name in BENCHMARKS.names():
            print(f"  {name:8s} {_description(name)}", file=sys.stderr)
        return 2
    benches = (named or ["toy"]) if cmd == "graph" else named if cmd == "run" else []
    unknown = [b for b in benches if b not in BENCHMARKS]
    if unknown:
        print(f"evaldag: error: unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS.names())}", file=sys.stderr)
        return 2
    top_help = cmd is None and bool({"-h", "--help"} & set(argv))
    argv = glue_shard(argv)  # `--shard -1/2` (run, graph) read as --shard=-1/2
    try:
        built = parser(benches, command=cmd, top_help=top_help)
    except OptionClash as e:  # two benchmarks of this command give one option two meanings
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    args = built.parse_args(argv)
    if args.cmd == "run":
        return run.cmd(args, argv)
    if args.cmd == "graph":
        return graph.cmd(args)
    if args.cmd == "report":
        return report.cmd(args)
    if args.cmd == "list":
        return list_cmd.cmd(args)
    if args.cmd == "cache":
        return cache.cmd(args)
    if args.cmd == "export":
        return export.cmd(args)
    if args.cmd == "compare":
        return compare.cmd(args)
    if args.cmd == "robustness":
        return robustness.cmd(args)
    if args.cmd == "metaeval":
        return metaeval.cmd(args)
    return next(ep for ep in entry_points(group=COMMANDS_GROUP) if ep.name == args.cmd).load().main(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
