"""``evaldag run BENCH [BENCH ...]``: build each benchmark's config once, run one graph, write the outputs."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

import pydantic

from ..benchmark import Benchmark
from ..menu import did_you_mean
from ..registry import BENCHMARKS
from ..report import write_report_html
from ..backend import ServingError
from ..cache import Cache, CacheWriteError
from ..distributed import Group, launch, prepare
from ..distributed.checkpoints import shared_graph
from ..executor import Executor
from ..graph import Graph, GraphError
from ..outputs import Interrupted, NotOurs, check_names, print_failures, print_run, write
from ..planner import plan
from ..progress import hushed
from ..redact import redact_argv
from ..resources import MissingResource, ResourceSet
from .. import runlog
from ..run import run
from .added import added_metrics
from .models import add_model_option, for_model, model_specs
from . import sweep
from .sweep import shard_record, take_shard
from .sweep_run import run_sweep
from .types import positive_float, positive_int


#: ``run --help`` / ``graph --help`` without a benchmark: where the model and data options are
BENCH_OPTIONS_HINT = ("Each benchmark adds its own options (--model, --data, --retain-model, --embeddings, "
                      "--generator, ...): name it to see them, e.g. `evaldag {cmd} tofu --help`.")


def add_parser(sub: argparse._SubParsersAction, benches: list[Benchmark]) -> argparse.ArgumentParser:
    r = sub.add_parser("run", help="run one or more benchmarks", conflict_handler="resolve",
                       epilog=None if benches else BENCH_OPTIONS_HINT.format(cmd="run"))
    r.add_argument("benchmarks", nargs="*", default=[], help=f"benchmarks to run ({', '.join(BENCHMARKS.names())})")
    r.add_argument("--out", default=None, help="output folder (default: ./evaldag-out)")
    r.add_argument("--cache-dir", default=None, help="cache folder (default: $EVALDAG_CACHE_DIR or the user cache dir); "
                                                     "one this process cannot write is used read-only")
    r.add_argument("--init-cache", action="store_true", help="make --cache-dir a cache even though it is a non-empty "
                   "folder without evaldag's marker (by default such a folder is refused: ~ or the working directory "
                   "must never become a cache by a typo)")
    r.add_argument("--lock-timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="give up (exit 2) when another process has held a node's lock this long; what was computed "
                        "stays stored (default: wait, saying after a few seconds which process holds it)")
    r.add_argument("--cache-read-from", default=None, metavar="DIR",
                   help="a read-only cache (a team's shared one) read where --cache-dir has no entry; new work goes to --cache-dir")
    r.add_argument("--metrics", default=None, help="comma-separated metric names as `evaldag list` shows them, "
                                                   "or default / all / a group such as mia or token_stats; -NAME leaves one out "
                                                   "(--metrics all,-mia_gradnorm, or --metrics=-mia_gradnorm: a lone -X is "
                                                   "taken for an option) (default: the benchmark's default set)")
    r.add_argument("--add-metric", action="append", default=[], metavar="NAME[@SPLIT]|FILE.py[:NAME][@SPLIT]|FILE.yaml",
                   help="also run a metric on the benchmarks' resources (its data: the forget split, or @SPLIT). "
                        "An argument naming an existing file is a file, anything else a registered metric name "
                        "(`evaldag list`, a third party's too). NAME and FILE.py (its @metric(s); also the "
                        "@unlearning_metric handlers a config reads): results land in OUT/RUN_EVAL.json / "
                        "RUN_SUMMARY.json (an lm-debugger MetricItem class: EDITING_EVAL.json under its class "
                        "name). FILE.yaml|.yml (an open-unlearning metric config, `# @package "
                        "eval.<bench>.metrics.NAME`): in OUT/<BENCH>_EVAL.json / <BENCH>_SUMMARY.json under NAME. "
                        "Repeatable")
    r.add_argument("-j", "--n-jobs", type=positive_int, default=1, help="parallel CPU workers for aggregators (joblib)")
    r.add_argument("--batch-tokens", type=positive_int, default=None, help="token budget per batch (default: per device)")
    r.add_argument("--refresh", choices=["nodes", "requests", "all"], default=None,
                   help="nodes: recompute every node from the cached model answers; requests: also ask the model "
                        "again for every request, replacing the cached answers; all: also re-hash the model files")
    r.add_argument("--force", dest="refresh", action="store_const", const="nodes", help="the same as --refresh nodes")
    r.add_argument("--progress", action="store_true", default=None,
                   help="show progress bars (model tokens; aggregator stages longer than a second) also when "
                        "stderr is not a terminal: plain lines every few seconds (default: bars only on a terminal)")
    r.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="no progress bars, even on a terminal")
    r.add_argument("--quiet", action="store_true", help="print only errors (failures always print); no progress bars")
    r.add_argument("--rehash", action="store_true", help="hash model files again, ignoring the cache's file-hash memo")
    r.add_argument("--deterministic", action="store_true",
                   help="run every model request alone, in a fixed order: slow, values independent of batching")
    launch.add_arguments(r)
    add_model_option(r, benches)  # the one owner of --model (a sweep when repeated)
    sweep.add_arguments(r)  # --step-of, --select (issue 32)
    for b in benches:
        b.add_arguments(r)
    return r


def config_error(e: Exception) -> str:
    """One line for a config that does not validate (pydantic's errors, joined)."""
    if isinstance(e, pydantic.ValidationError):
        return "; ".join((".".join(map(str, err["loc"])) + ": " if err["loc"] else "")
                         + str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
    return str(e)


def check_metric_words(args: argparse.Namespace, benches: list[Benchmark]) -> None:
    """With several benchmarks, each ``--metrics`` word must belong to at least one of them."""
    if not getattr(args, "metrics", None) or len(benches) < 2:
        return
    for word in (w.strip() for w in args.metrics.split(",")):
        if word and not any(b.metric_menu().knows(word) for b in benches):
            known = {w for b in benches for w in b.metric_menu().words()}
            raise ValueError(f"no benchmark of this run has a metric {word!r}; {did_you_mean(word, known)}"
                             "(see `evaldag list`)")


def configs(args: argparse.Namespace, benches: list[Benchmark]) -> list[pydantic.BaseModel]:
    """Each benchmark's config, parsed from the command line once."""
    check_metric_words(args, benches)
    return [b.config_from_args(args) for b in benches]


def show_progress(args: argparse.Namespace) -> bool | None:
    """--quiet: no bars; --progress / --no-progress: forced; neither: None, a bar on a terminal only."""
    return False if args.quiet else args.progress


def check_folders(cache_dir: str | None, out: Path) -> None:
    """--cache-dir and --out, before anything is built: a file or a folder we cannot write is one line."""
    if cache_dir is not None and not cache_dir.strip():  # "$UNSET": never the working directory
        raise ValueError("--cache-dir is an empty path (an unset variable?): give a folder, or leave the flag out "
                         "for the default cache")
    if cache_dir is not None and Path(cache_dir).exists() and not Path(cache_dir).is_dir():
        raise ValueError(f"--cache-dir {cache_dir}: a file, not a folder")
    where = out
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise ValueError(f"--out {out}: {where} is a file, not a folder")
    if not os.access(where, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out}: cannot write in {where}")


def check_out_vs_inputs(out: Path, inputs: list[tuple[str, Path]]) -> None:
    """--out must not be, hold or lie inside anything the run reads (retain logs, a model, data):
    publishing there would replace files that cannot be rebuilt."""
    o = Path(os.path.realpath(out))
    for flag, path in inputs:
        p = Path(os.path.realpath(path))
        how = "is" if o == p else "lies inside" if p in o.parents else "holds" if o in p.parents else None
        if how:
            raise ValueError(f"--out {out} {how} the input {flag} {path}; choose another --out (nothing was written)")


def check_out(out: Path, benches: list[Benchmark], cfgs: list, report: bool) -> None:
    """Before anything is built: --out clear of every input, and no name the run will write
    already taken by a file evaldag did not write as that output."""
    check_out_vs_inputs(out, [fp for b, cfg in zip(benches, cfgs) for fp in b.input_paths(cfg)])
    groups = {b.group.upper() for b in benches if b.group}
    check_names(out, [f"{g}_{kind}.json" for g in sorted(groups) for kind in ("EVAL", "SUMMARY")]
                + ["run.json"] + (["report.html"] if report else []))


def cmd(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    # run.json names the command as typed (also when main() is called from Python), secrets masked
    args.command_line = redact_argv(["evaldag", *(sys.argv[1:] if argv is None else argv)])
    if args.launcher == "torchrun":
        return launch.exec_torchrun(argv or [], args)
    try:
        group = launch.join()  # None unless torchrun started several ranks
    except launch.RankFailure as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or "evaldag-out")
    old = term_raises()
    try:
        with hushed(args.quiet):  # --quiet: no lines about a server's retries either
            return _cmd(args, group)
    except (KeyboardInterrupt, Interrupted) as e:  # one line saying what OUT now holds
        signum = getattr(e, "signum", signal.SIGINT)
        what = "published the new set in" if getattr(e, "published", False) else "kept the previous outputs in"
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


def _cmd(args: argparse.Namespace, group: Group | None) -> int:
    benches = [BENCHMARKS.get(n) for n in args.benchmarks]
    out = Path(args.out or "evaldag-out")
    try:
        models = model_specs(args)
    except (OSError, ValueError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    shard = getattr(args, "shard", None)
    if shard is not None:  # one share of the sweep, laid out as the whole sweep would be
        if models == [None]:
            print("evaldag: error: --shard needs the checkpoints of the sweep (--model, repeated, a glob or @FILE)",
                  file=sys.stderr)
            return 2
        models, names = take_shard(models, shard)
        if not models:
            print(f"evaldag: shard {shard[0]}/{shard[1]} has no checkpoints (fewer checkpoints than shards); "
                  "nothing to do", file=sys.stderr)
            return 0
        record = shard_record(args, shard, benches, group)
        try:
            return run_sweep(args, benches, group, out, models, _one, names=names)
        finally:
            if record is not None:
                record.leave()
    if len(models) < 2:  # one run (the usual case)
        return _one(for_model(args, models[0]), benches, group, out, report=True)
    return run_sweep(args, benches, group, out, models, _one)  # several checkpoints (cli/sweep_run.py)


def interrupted(cache: Cache | None, executor: Executor | None) -> str:
    """Ctrl-C: one line saying what this run stored (node entries, model answers) and so
    keeps; the cache is written entry by entry, atomically, so a rerun resumes from there."""
    nodes = cache.nodes.stored if cache is not None else 0
    answers = sum(len(keys) for keys in executor._written.values()) if executor is not None else 0
    return f"evaldag: interrupted: {nodes} nodes and {answers} model results kept; rerun to resume"


def agree(group: Group | None, failed: Exception | None, what: str) -> None:
    """Raise ``failed`` on its rank and a one-line RankFailure on every other rank, if any rank
    failed ``what``. A failure of one rank's own (its cache folder, its file system) would
    otherwise leave the others waiting in their next collective: for a training job's group
    (integrations/), until the job's own timeout, half an hour by default."""
    if group is not None:
        try:
            group.raise_if_any(failed, what)
        except launch.RankFailure:  # the group itself broke: said as it is
            if failed is None:
                raise
        except RuntimeError as e:  # another rank's failure
            if failed is None:
                raise launch.RankFailure(f"{e}; every rank stops") from None
    if failed is not None:
        raise failed


def _one(args: argparse.Namespace, benches: list[Benchmark], group: Group | None, out: Path, report: bool,
         label: str | None = None, shared_only: bool = False) -> int:
    held: dict = {"shared_only": shared_only}  # the cache and executor, once built
    try:
        return _one_run(args, benches, group, out, report, held, label)
    except KeyboardInterrupt:  # no traceback: what was stored stays stored
        if held.get("publishing"):  # the run is stored; cmd() says which outputs set OUT now shows
            raise
        print(interrupted(held.get("cache"), held.get("executor")), file=sys.stderr)
        return 130


def _one_run(args: argparse.Namespace, benches: list[Benchmark], group: Group | None, out: Path, report: bool,
             held: dict, label: str | None = None) -> int:
    nodes, resources = [], {}
    try:
        failed: Exception | None = None
        try:
            check_folders(args.cache_dir, out)
            cfgs = configs(args, benches)
            check_out(out, benches, cfgs, report)
            for b, cfg in zip(benches, cfgs):
                n, res = b.build(cfg)
                nodes += n
                resources.update(res)
            nodes += added_metrics(args.add_metric, resources, list(zip(benches, cfgs)))
            resources.update(getattr(args, "in_memory", None) or {})  # integrations/: the Trainer's model for --model's
            if held["shared_only"]:  # a checkpoint-parallel sweep's first step: only what every checkpoint shares
                nodes = shared_graph(Graph(nodes), resources)
                if nodes is None:
                    return 0
            plan(nodes if isinstance(nodes, Graph) else Graph(nodes), ResourceSet(resources))  # what no backend can serve: refused before the cache is made
            cache = Cache(args.cache_dir, rehash=args.rehash or args.refresh == "all", read_from=args.cache_read_from)
            cache.claim(init=args.init_cache)  # before any model loads: an unmarked non-empty folder is refused
            with cache.filehash.active():  # a resource that can check its input does so once, up front
                for res in resources.values():
                    getattr(res, "validate", lambda: None)()
        except Exception as e:  # noqa: BLE001 - every rank learns of it; re-raised as it was on its own rank
            failed = e
        agree(group, failed, "the set-up")
        executor = Executor(cache=cache.requests, progress=show_progress(args), batch_tokens=args.batch_tokens,
                            deterministic=args.deterministic)
        if group is not None:  # same plan on every rank, agreed cached nodes, sharded forward passes
            nodes, cache, executor = prepare(group, nodes, resources, cache, progress=show_progress(args),
                                             batch_tokens=args.batch_tokens, deterministic=args.deterministic)
        executor.refresh = args.refresh in ("requests", "all")
        held.update(cache=cache, executor=executor)
        result = run(nodes, resources, cache=cache, executor=executor, n_jobs=args.n_jobs,
                     force=args.refresh is not None, deterministic=args.deterministic,
                     init_cache=args.init_cache, lock_timeout=args.lock_timeout,
                     provenance={"command": args.command_line, **getattr(args, "sweep_provenance", {})})
    except (GraphError, MissingResource, ValueError, OSError, launch.RankFailure, ServingError) as e:  # a full disk, a server gone: one line
        flags = {res: flag for b in benches for res, flag in getattr(b, "resource_flags", {}).items()}
        hints = [f"pass {flag}" for res, flag in flags.items() if f"'{res}'" in str(e)]
        print(f"evaldag: error: {config_error(e)}" + (f" ({'; '.join(hints)})" if hints else ""), file=sys.stderr)
        return 2
    done = launch.finish(group, result)  # only rank 0 writes the outputs
    if done is not None or held["shared_only"]:
        return done if done is not None else (0 if result.ok else 1)
    # a benchmark may write its own files too (WEAT: {query: {metric: fields}}); all are one set
    also = [lambda res, folder, b=b, cfg=cfg: b.write_outputs(res, folder, cfg) for b, cfg in zip(benches, cfgs)]
    if report:  # the report is part of the set: drawn from the staged files, titled after OUT
        title = f"evaldag report: {', '.join(b.name for b in benches)}"  # this run's benchmarks, nothing else
        also.append(lambda res, folder: write_report_html([folder], folder / "report.html", shown=[out], title=title))
    held["publishing"] = True
    try:
        write(result, out, bench=benches[0].group, benchmarks=[b.name for b in benches], refresh=args.refresh, also=also)
    except (CacheWriteError, NotOurs) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    runlog.record(cache, result, out, [b.name for b in benches])  # `evaldag cache runs` finds it again
    if not args.quiet:
        print_run(result, out, label=label)
    else:  # failures always print, whatever the verbosity
        print_failures(result, sys.stderr)
    return 0 if result.ok else 1
