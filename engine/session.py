"""The library driver: benchmarks' configs in, one run, its outputs written.

::

    from evaldag.engine.registry import BENCHMARKS
    from evaldag.engine.session import RunOptions, run_benchmarks

    tofu = BENCHMARKS.get("tofu")
    outcome = run_benchmarks([tofu], [tofu.Config(data="TOFU/", model="ckpt/")], RunOptions(out="out/"))
    outcome.code, outcome.result.summary()

:func:`run_benchmarks` is the sibling of :func:`evaldag.engine.run` (``run.py``), one level
up: ``run()`` runs a graph with its resources bound and returns a ``RunResult``; this builds
each benchmark's graph from its typed config, plans it once (what no backend can serve is
refused before the cache is made), claims the cache once, builds one executor (a sharded one
under torchrun), runs the graph through ``run.py``'s body and writes ``OUT``'s set
(``<GROUP>_EVAL.json``, ``_SUMMARY.json``, ``run.json``, the benchmarks' own files,
``report.html``). The command line (``cli/run.py``), the sweep (``session_sweep.py``) and the
Trainer callback (``integrations/``) all run through it.

Errors the user can cause are one ``evaldag: error:`` line and exit code 2; under torchrun
every rank learns of one rank's failure (:func:`agree`), so none waits in a collective.

``RunOptions.events`` is where a run says what it is doing (``plan``, ``run``, ``written``):
a callable that receives each :class:`Event`. It is the home of what a front end shows of a
long run -- the plan, a cost estimate, progress, a request to stop -- so that the driver and
the executor emit and the command line or a notebook only renders.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pydantic

from . import runlog
from .added import added_metrics
from .backend import ServingError
from .cache import Cache, CacheWriteError
from .distributed import Group, launch, prepare
from .distributed.checkpoints import shared_graph
from .executor import Executor
from .costs import format_plan, plan_costs
from .graph import Graph, GraphError
from .outputs import Interrupted, NotOurs, check_names, print_failures, print_run, write
from .planner import plan
from .report import write_report_html
from .resources import MissingResource, ResourceSet
from .results import RunResult
from .run import execute
from .robustness_report import FILE as ROBUSTNESS_FILE, robustness, write_into_run
from .session_control import Control, control_run, later_runs
from .transforms import Transform, TransformError, derive_resources


@dataclass(frozen=True)
class Event:
    """Something a run did: ``kind`` (``plan``, ``run``, ``written``; a sweep's ``sweep``, its
    ``sweep_plan.SweepPlan``) and what it concerns."""

    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunOptions:
    """How a run runs and where it writes; the benchmarks' own choices are their configs.

    ``refresh``: ``nodes`` (recompute every node from the cached answers), ``requests`` (ask
    the model again too) or ``all`` (also re-hash the model files). ``progress``: None shows
    bars on a terminal only; ``quiet`` prints only errors and no bars. ``add_metrics``:
    ``--add-metric``'s arguments (``added.py``). ``resources``: resources that replace the
    built ones by name (the Trainer's in-memory model for ``model``). ``command``: run.json's
    command line; ``provenance``: more run.json provenance (a sweep's block). ``report``:
    write ``OUT/report.html`` with the set; ``label``: the name the summary line gives the run.
    ``attacks``: model attacks (``--attack``, ``transforms.py``), each run after the plain run
    on the models it derives, into ``OUT/attacks/<attack>/`` as a plain run writes its files;
    ``transform``: the one model attack this run's models are derived by. ``control``: with a
    relearning, the retain model's own runs too, into ``OUT/control/`` (``session_control.py``).
    """

    out: str | os.PathLike = "evaldag-out"
    cache_dir: str | None = None
    cache_read_from: str | None = None
    init_cache: bool = False
    lock_timeout: float | None = None
    refresh: str | None = None
    rehash: bool = False
    n_jobs: int = 1
    batch_tokens: int | None = None
    deterministic: bool = False
    prefix_sharing: bool = True  # a context shared by several requests computed once (off under deterministic)
    progress: bool | None = None
    quiet: bool = False
    add_metrics: tuple[str, ...] = ()
    resources: Mapping[str, Any] = field(default_factory=dict)
    command: tuple[str, ...] | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)
    report: bool = True
    label: str | None = None
    events: Callable[[Event], None] | None = None
    plan_only: bool = False  # count the model work, print it, run nothing (costs.py)
    attacks: tuple[Transform, ...] = ()  # model attacks run beside the plain run: OUT/attacks/<attack>/ each
    transform: Transform | None = None  # this run's models are the ones this transform derives (transforms.py)
    control: bool = True  # relearning's control: the retain model's own runs in OUT/control/

    @property
    def out_dir(self) -> Path:
        return Path(self.out)

    def show_progress(self) -> bool | None:
        """quiet: no bars; progress True / False: forced; None: a bar on a terminal only."""
        return False if self.quiet else self.progress

    def emit(self, kind: str, **data: Any) -> None:
        if self.events is not None:
            self.events(Event(kind, data))


@dataclass
class Outcome:
    """A finished run: its exit ``code`` (0 ok, 1 a metric failed, 2 refused, 130 interrupted),
    the ``result`` (None when it did not run), and the folder it wrote (``out``)."""

    code: int
    out: Path
    result: RunResult | None = None


def config_error(e: Exception) -> str:
    """One line for a config that does not validate (pydantic's errors, joined)."""
    if isinstance(e, pydantic.ValidationError):
        return "; ".join((".".join(map(str, err["loc"])) + ": " if err["loc"] else "")
                         + str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
    return str(e)


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


def check_out(out: Path, benches: Sequence[Any], cfgs: Sequence[Any], report: bool) -> None:
    """Before anything is built: --out clear of every input, and no name the run will write
    already taken by a file evaldag did not write as that output."""
    check_out_vs_inputs(out, [fp for b, cfg in zip(benches, cfgs) for fp in b.input_paths(cfg)])
    groups = {b.group.upper() for b in benches if b.group}
    check_names(out, [f"{g}_{kind}.json" for g in sorted(groups) for kind in ("EVAL", "SUMMARY")]
                + ["run.json"] + (["report.html"] if report else []))


def error_line(e: Exception, benches: Sequence[Any]) -> str:
    """The run's one error line, with the flag that supplies a missing resource when one does."""
    flags = {res: flag for b in benches for res, flag in getattr(b, "resource_flags", {}).items()}
    line = config_error(e)  # a validation error's input (every field, 'model' among them) is no missing resource
    hints = [f"pass {flag}" for res, flag in flags.items() if f"'{res}'" in line]
    return f"evaldag: error: {line}" + (f" ({'; '.join(hints)})" if hints else "")


def interrupted(cache: Cache | None, executor: Executor | None, signame: str | None = None) -> str:
    """Ctrl-C or SIGTERM before the outputs: one line saying what this run stored (node entries,
    model answers) and so keeps; the cache is written entry by entry, atomically, so a rerun
    resumes from there. ``signame`` (SIGTERM) names the signal; Ctrl-C's line names none."""
    nodes = cache.nodes.stored if cache is not None else 0
    answers = sum(len(keys) for keys in executor._written.values()) if executor is not None else 0
    how = f" ({signame})" if signame else ""
    return f"evaldag: interrupted{how}: {nodes} nodes and {answers} model results kept; rerun to resume"


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


def build(benches: Sequence[Any], cfgs: Sequence[Any], options: RunOptions) -> tuple[list, dict[str, Any]]:
    """The run's nodes and resources: each benchmark's, the added metrics, then
    ``options.resources`` in place of the built ones of the same name."""
    nodes: list = []
    resources: dict[str, Any] = {}
    for b, cfg in zip(benches, cfgs):
        n, res = b.build(cfg)
        nodes += n
        resources.update(res)
    nodes += added_metrics(list(options.add_metrics), resources, list(zip(benches, cfgs)))
    resources.update(options.resources)
    if options.transform is not None:  # a model attack's run: its models replaced by the derived ones
        resources = derive_resources(resources, options.transform)
    return nodes, resources


def check_serves(benches: Sequence[Any], cfgs: Sequence[Any], options: RunOptions) -> None:
    """What the run's backends cannot serve, refused in the planner's one line (GraphError,
    ValueError, OSError); nothing loaded, nothing written."""
    nodes, resources = build(benches, cfgs, options)
    plan(Graph(nodes), ResourceSet(resources))


def run_benchmarks(benches: Sequence[Any], cfgs: Sequence[Any], options: RunOptions = RunOptions(),
                   group: Group | None = None, *, shared_only: bool = False) -> Outcome:
    """One run of ``benches`` with their ``cfgs`` into ``options.out``; see the module's text.

    ``group``: the torchrun job's (or a training job's) process group, None for one process.
    ``shared_only``: only the part of the graph that does not read ``model`` (a
    checkpoint-parallel sweep's first step, run by every rank), and no outputs."""
    if options.attacks:
        return _with_attacks(list(benches), list(cfgs), options, group, shared_only)
    held: dict[str, Any] = {}  # the cache and executor, once built
    out = options.out_dir
    try:
        return Outcome(_run(list(benches), list(cfgs), options, group, shared_only, held), out, held.get("result"))
    except KeyboardInterrupt:  # no traceback: what was stored stays stored
        if held.get("publishing"):  # the run is stored; the command line says which outputs set OUT now shows
            raise
        print(interrupted(held.get("cache"), held.get("executor")), file=sys.stderr)
        return Outcome(130, out, held.get("result"))
    except Interrupted as e:  # SIGTERM before the outputs: the same account, the command line exits 143
        if not held.get("publishing"):
            print(interrupted(held.get("cache"), held.get("executor"), e.args[0]), file=sys.stderr)
            e.said = True
        raise
    finally:  # a run from Python leaves no open database behind (the command line's process ends anyway)
        if held.get("cache") is not None:
            held["cache"].close()


def attack_options(options: RunOptions, transform: Transform) -> RunOptions:
    """The options of ``transform``'s run beside the plain one: its own folder, ``OUT/attacks/<attack>/``."""
    return replace(options, attacks=(), transform=transform, out=options.out_dir / "attacks" / transform.folder(),
                   label=f"{options.label or options.out_dir} [{transform.text}]")


def check_attacks(benches: list, cfgs: list, options: RunOptions) -> None:
    """Every model attack usable before any work: its own checks (a package, a data split), a
    model it can derive from (a backend that cannot hand over weights is named), and a derived
    model that serves every metric of the run (the planner's line)."""
    folders: dict[str, str] = {}
    for t in options.attacks:
        if t.folder() in folders:
            raise TransformError(f"--attack {t.text} and --attack {folders[t.folder()]} write one folder "
                                 f"(attacks/{t.folder()}); give each model attack once")
        folders[t.folder()] = t.text
        t.check()
        check_serves(benches, cfgs, attack_options(options, t))  # built and planned: nothing loaded


def _with_attacks(benches: list, cfgs: list, options: RunOptions, group: Group | None, shared_only: bool) -> Outcome:
    """The plain run, the control's (``session_control.py``), then each model attack's run into
    ``OUT/attacks/<attack>/`` (and the control's under it); the worst exit code."""
    ctl = None if shared_only else control_run(benches, cfgs, options)
    try:
        check_attacks(benches, cfgs, options)
        if ctl is not None:  # its folder, its inputs, what it serves plain and attacked
            check_folders(ctl.options.cache_dir, ctl.options.out_dir)
            check_out(ctl.options.out_dir, ctl.benches, ctl.cfgs, ctl.options.report)
            check_serves(ctl.benches, ctl.cfgs, replace(ctl.options, attacks=()))
            check_attacks(ctl.benches, ctl.cfgs, ctl.options)
    except (ValueError, OSError, MissingResource, GraphError) as e:
        print(error_line(e, benches), file=sys.stderr)
        return Outcome(2, options.out_dir)
    plain = run_benchmarks(benches, cfgs, replace(options, attacks=()), group, shared_only=shared_only)
    if plain.code in (2, 130) or shared_only:
        return plain
    code = plain.code
    for b, c, o in later_runs(benches, cfgs, options, ctl, attack_options):
        done = run_benchmarks(b, c, o, group)
        code = max(code, done.code)
        if done.code in (2, 130):
            break
    else:
        if (group is None or group.rank == 0) and not options.plan_only:  # a plan wrote no run to score
            _robustness(benches, options, ctl)
    return Outcome(code, plain.out, plain.result)


def _robustness(benches: list, options: RunOptions, ctl: Control | None) -> None:
    """``OUT/ROBUSTNESS.json`` (``robustness_report.py``), R against the control's runs (none: R
    refused by metric, saying so), and the report redrawn with its section."""
    out = options.out_dir
    try:
        data = robustness(out, {t.folder(): out / "attacks" / t.folder() for t in options.attacks},
                          *(ctl.folders() if ctl is not None else (None, None)))
        path = write_into_run(out, data)
        if options.report:
            write_report_html([out], out / "report.html", title=f"evaldag report: {', '.join(b.name for b in benches)}")
    except (ValueError, OSError) as e:  # the runs' own files are published: say what is missing, keep them
        print(f"evaldag: warning: no {ROBUSTNESS_FILE} ({e})", file=sys.stderr)
        return
    if not options.quiet:
        print(f"robustness of each metric under the model attacks: {path}")


def _run(benches: list, cfgs: list, o: RunOptions, group: Group | None, shared_only: bool, held: dict) -> int:
    out = o.out_dir
    settings = {"progress": o.show_progress(), "batch_tokens": o.batch_tokens, "deterministic": o.deterministic,
                "prefix_sharing": o.prefix_sharing}
    try:
        failed: Exception | None = None
        try:
            check_folders(o.cache_dir, out)
            check_out(out, benches, cfgs, o.report)
            nodes, resources = build(benches, cfgs, o)
            graph: Graph | None = Graph(nodes)
            if shared_only:  # a checkpoint-parallel sweep's first step: only what every checkpoint shares
                graph = shared_graph(graph, resources)
                if graph is None:
                    return 0
            rs = ResourceSet(resources)
            served = plan(graph, rs)  # what no backend can serve: refused before the cache is made
            o.emit("plan", graph=graph, plan=served)
            if o.plan_only:  # the model work counted from the data and the tokenizers; nothing written
                costs, uncounted = plan_costs(graph, rs, o.prefix_sharing and not o.deterministic, o.batch_tokens)
                o.emit("cost", costs=costs, uncounted=uncounted)
                print("\n".join(format_plan(costs, uncounted)))
                return 0
            cache = Cache(o.cache_dir, rehash=o.rehash or o.refresh == "all", read_from=o.cache_read_from)
            cache.claim(init=o.init_cache)  # before any model loads: an unmarked non-empty folder is refused
            with cache.filehash.active():  # a resource that can check its input does so once, up front
                for res in resources.values():
                    getattr(res, "validate", lambda: None)()
        except Exception as e:  # noqa: BLE001 - every rank learns of it; re-raised as it was on its own rank
            failed = e
        agree(group, failed, "the set-up")
        if group is not None:  # same plan on every rank, agreed cached nodes, sharded forward passes
            graph, cache, executor = prepare(group, graph, rs, cache, served=served, **settings)
        else:
            executor = Executor(cache=cache.requests, **settings)
        executor.refresh = o.refresh in ("requests", "all")
        held.update(cache=cache, executor=executor)
        o.emit("run", graph=graph)
        try:
            result = execute(graph, rs, cache, executor, served, settings=settings, n_jobs=o.n_jobs,
                             force=o.refresh is not None, lock_timeout=o.lock_timeout, fingerprinted=group is not None,
                             provenance={**({"command": list(o.command)} if o.command is not None else {}), **o.provenance})
        except (KeyboardInterrupt, Interrupted) as e:  # `cache runs` lists a stopped run too, said as such
            runlog.record_stopped(cache, o.command, [b.name for b in benches], rs, out, getattr(e, "signum", 2))
            raise
        held["result"] = result
    except (GraphError, MissingResource, ValueError, OSError, launch.RankFailure, ServingError) as e:  # a full disk, a server gone: one line
        print(error_line(e, benches), file=sys.stderr)
        return 2
    done = launch.finish(group, result)  # only rank 0 writes the outputs
    if done is not None or shared_only:
        return done if done is not None else (0 if result.ok else 1)
    # a benchmark may write its own files too (WEAT: {query: {metric: fields}}); all are one set
    also = [lambda res, folder, b=b, cfg=cfg: b.write_outputs(res, folder, cfg) for b, cfg in zip(benches, cfgs)]
    if o.report:  # the report is part of the set: drawn from the staged files, titled after OUT
        title = f"evaldag report: {', '.join(b.name for b in benches)}"  # this run's benchmarks, nothing else
        also.append(lambda res, folder: write_report_html([folder], folder / "report.html", shown=[out], title=title))
    held["publishing"] = True
    try:
        write(result, out, bench=benches[0].group, benchmarks=[b.name for b in benches], refresh=o.refresh, also=also)
    except (CacheWriteError, NotOurs) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    runlog.record(cache, result, out, [b.name for b in benches])  # `evaldag cache runs` finds it again
    o.emit("written", out=out, result=result)
    if not o.quiet:
        print_run(result, out, label=o.label)
    else:  # failures always print, whatever the verbosity
        print_failures(result, sys.stderr)
    return 0 if result.ok else 1
