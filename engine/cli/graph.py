"""``evaldag graph``: draw a benchmark's plan before a run, or a finished run.

Drawing a plan never loads a model: a benchmark's ``plan`` only declares nodes, and
``build``'s lazy resources are touched (to fingerprint them, not to load weights) only
when ``--cache-dir`` asks which nodes the store already holds.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..benchmark import Benchmark
from ..cache import Cache
from ..graph import Graph
from ..outfolder import META, is_our_link
from ..registry import BENCHMARKS
from ..render import FORMATS, render
from ..planner import plan
from ..report import benchmarks_of, runs_of, splits_of
from ..resources import ResourceSet
from ..sweepdir import run_folders
from ..views import from_graph, runs_view
from ..option_owners import declare
from ..options import add_model_option, configs, model_specs
from ..session import config_error
from .run import BENCH_OPTIONS_HINT


def add_parser(sub: argparse._SubParsersAction, benches: list[Benchmark]) -> argparse.ArgumentParser:
    g = sub.add_parser(
        "graph", help="draw a benchmark's plan (before a run) or a finished run",
        description="Draw the metric graph of benchmarks before running them (plan view), or of a finished "
                    "run with --run OUT_DIR (each node's status, time and value).",
        epilog=BENCH_OPTIONS_HINT.format(cmd="graph"))
    g.add_argument("benchmarks", nargs="*", default=[], help="benchmarks to draw (default: toy)")
    g.add_argument("--run", dest="run_dir", metavar="OUT_DIR", default=None, help="draw the finished run in OUT_DIR instead (a sweep's --out: every checkpoint, shared work once)")
    g.add_argument("--format", choices=FORMATS, default="mermaid", help="output format (default: mermaid)")
    g.add_argument("--out", "-o", default=None, help="write to this file (default: standard output)")
    g.add_argument("--metrics", default=None, help="comma-separated metric names, default / all / a group, -NAME to leave one out "
                                                   "(all,-mia_gradnorm) (default: the benchmark's default set)")
    g.add_argument("--cache-dir", default=None, help="plan view: mark nodes this cache already holds (fingerprints resources)")
    g.add_argument("--show-resources", action="store_true", help="draw inputs (model, data splits) as nodes too")
    add_model_option(g, benches)
    declare(g, benches)
    return g


def plan_view(args: argparse.Namespace):
    """Build the benchmarks' nodes (no model loaded) and their plan view."""
    names = args.benchmarks or ["toy"]
    benches = [BENCHMARKS.get(n) for n in names]
    models = model_specs(args)
    if len(models) > 1:
        raise ValueError(f"--model: a plan is drawn for one checkpoint, got {len(models)}")
    nodes, resources = [], {}
    bound = bool(args.cache_dir)  # every benchmark's resources, so fingerprints and cache status
    for b, cfg in zip(benches, configs(args, benches, models[0])):
        if args.cache_dir:  # cache status needs the resources' fingerprints: data and model paths
            try:
                n, res = b.build(cfg)
            except (ValueError, OSError) as e:
                print(f"evaldag: warning: {b.name}: cannot bind its data or models ({config_error(e)}); "
                      "drawing its plan without cache status", file=sys.stderr)
                bound = False
            else:
                nodes += n
                resources.update(res or {})
                continue
        nodes += b.plan(cfg)  # structure only: no data or model needed
    graph = Graph(nodes)
    if bound:  # which backend will serve each scorer (a refusal is the run's one error line)
        served = plan(graph, ResourceSet(resources))
        for key, backends in served.labels.items():
            said = ", ".join(f"{res}: {label}" for res, label in sorted(backends.items()))
            print(f"evaldag: {graph.vertices[key].label} <- {said}", file=sys.stderr)
    store = None
    if bound:
        try:
            graph.fingerprint(ResourceSet(resources), served=served)  # a --fallback vertex keyed as run() keys it
            store = Cache(args.cache_dir).nodes
        except Exception as e:  # a missing dataset must not stop a drawing
            print(f"evaldag: warning: cannot fingerprint resources ({e}); drawing the plan without cache status", file=sys.stderr)
    return from_graph(graph, store=store, show_resources=args.show_resources, title=f"evaldag plan: {', '.join(names)}",
                      splits=splits_of(benches))


def run_view(args: argparse.Namespace):
    """A finished run, banded by the data splits of the benchmarks it ran; a sweep's OUT:
    its checkpoints in one picture, the work they share drawn once."""
    runs = run_folders([args.run_dir])
    try:
        splits = splits_of(benchmarks_of(runs_of([folder for _, folder in runs])))
    except FileNotFoundError:  # from_run_dir says what is missing
        splits = splits_of([])
    return runs_view(runs, show_resources=args.show_resources, splits=splits)


def cmd(args: argparse.Namespace) -> int:
    try:
        if args.run_dir:
            if args.benchmarks:
                print("evaldag: error: give benchmarks or --run OUT_DIR, not both", file=sys.stderr)
                return 2
            view = run_view(args)
        else:
            view = plan_view(args)
        text = render(view, args.format)
    except (OSError, ValueError, KeyError) as e:
        print(f"evaldag: error: {config_error(e)}", file=sys.stderr)
        return 2
    if args.out:
        out = Path(args.out)
        if os.path.lexists(out) and (is_our_link(out) or out.suffix == ".json" or META in out.resolve().parts):
            # a drawing never replaces a run's files (results, run.json, a set's report)
            print(f"evaldag: error: --out {out}: a run's output file, not a drawing; refusing to replace it", file=sys.stderr)
            return 2
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
