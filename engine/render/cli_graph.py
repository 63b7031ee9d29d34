"""``evaldag graph`` and ``evaldag report``: the command-line side of rendering.

engine/cli.py owns the parser; it calls :func:`add_graph_parser` /
:func:`add_report_parser` to add these sub-commands and :func:`cmd_graph` /
:func:`cmd_report` to run them. Drawing a plan never loads a model: the benchmark's
``build`` only declares nodes and lazy resources, and resources are touched (to
fingerprint them, not to load weights) only when ``--cache-dir`` asks which nodes the
store already holds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FORMATS = ("mermaid", "dot", "json", "svg", "html")


def add_graph_parser(subparsers: argparse._SubParsersAction, benchmarks: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``graph`` sub-command; ``benchmarks`` named on the command line add their options."""
    g = subparsers.add_parser(
        "graph", help="draw a benchmark's plan (before a run) or a finished run", conflict_handler="resolve",
        description="Draw the metric graph of benchmarks before running them (plan view), or of a finished "
                    "run with --run OUT_DIR (each node's status, time and value).")
    g.add_argument("benchmarks", nargs="*", default=[], help="benchmarks to draw (default: toy)")
    g.add_argument("--run", dest="run_dir", metavar="OUT_DIR", default=None, help="draw the finished run in OUT_DIR instead")
    g.add_argument("--format", choices=FORMATS, default="mermaid", help="output format (default: mermaid)")
    g.add_argument("--out", "-o", default=None, help="write to this file (default: standard output)")
    g.add_argument("--metrics", default=None, help="comma-separated metric names (default: the benchmark's default set)")
    g.add_argument("--cache-dir", default=None, help="plan view: mark nodes this cache already holds (fingerprints resources)")
    g.add_argument("--show-resources", action="store_true", help="draw inputs (model, data splits) as nodes too")
    if benchmarks:
        from ..cli import _bench_module

        for name in benchmarks:
            _bench_module(name).add_arguments(g)
    return g


def add_report_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    r = subparsers.add_parser(
        "report", help="write one self-contained report.html for one or more finished runs",
        description="Metrics side by side, truth-ratio / MIA ROC / probability plots, the run graph and run "
                    "statistics, in one HTML file that needs no network.")
    r.add_argument("out_dirs", nargs="+", metavar="OUT_DIR", help="--out folders of finished runs (one column each)")
    r.add_argument("--out", "-o", default=None, help="the HTML file (default: OUT_DIR/report.html for one folder, else ./report.html)")
    r.add_argument("--title", default="evaldag report")
    return r


def _with_bench_defaults(args: argparse.Namespace, module) -> argparse.Namespace:
    """Fill in a benchmark's own options when the parser did not add them."""
    p = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
    module.add_arguments(p)
    try:
        defaults = vars(p.parse_args([]))
    except SystemExit:  # a benchmark with required options: its build will say what is missing
        defaults = {}
    for k, v in defaults.items():
        if not hasattr(args, k):
            setattr(args, k, v)
    return args


def plan_view(args: argparse.Namespace):
    """Build the benchmarks' nodes (no model loaded) and their plan view."""
    from ..cli import _bench_module
    from ..graph import Graph
    from .view import from_graph

    benches = args.benchmarks or ["toy"]
    nodes, resources = [], {}
    for name in benches:
        mod = _bench_module(name)
        bargs = _with_bench_defaults(args, mod)
        if hasattr(mod, "plan") and not args.cache_dir:  # structure only: no data or model needed
            nodes += mod.plan(bargs)
            continue
        n, res = mod.build(bargs)
        nodes += n
        resources.update(res or {})
    graph = Graph(nodes)
    store = None
    if args.cache_dir:
        from ..resources import ResourceSet
        from ..cache import Cache

        try:
            graph.fingerprint(ResourceSet(resources))
            store = Cache(args.cache_dir).nodes
        except Exception as e:  # a missing dataset must not stop a drawing
            print(f"evaldag: warning: cannot fingerprint resources ({e}); drawing the plan without cache status", file=sys.stderr)
    return from_graph(graph, store=store, show_resources=args.show_resources, title=f"evaldag plan: {', '.join(benches)}")


def cmd_graph(args: argparse.Namespace) -> int:
    from . import render as render_to
    from .view import from_run_dir

    try:
        if args.run_dir:
            if args.benchmarks:
                print("evaldag: error: give benchmarks or --run OUT_DIR, not both", file=sys.stderr)
                return 2
            view = from_run_dir(args.run_dir, show_resources=args.show_resources)
        else:
            view = plan_view(args)
        text = render_to(view, args.format)
    except (OSError, ValueError, KeyError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .report_html import write_report_html

    dest = Path(args.out) if args.out else (Path(args.out_dirs[0]) / "report.html" if len(args.out_dirs) == 1 else Path("report.html"))
    try:
        path = write_report_html(args.out_dirs, dest, title=args.title)
    except (OSError, ValueError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0
