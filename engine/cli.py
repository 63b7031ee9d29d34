"""The ``evaldag`` command line.

    evaldag demo                          three bundled checkpoints on TOFU, offline
    evaldag run [BENCH ...] [options]     run benchmarks (default: the toy graph)
    evaldag graph BENCH | --run OUT_DIR   draw the plan of a benchmark, or a finished run
    evaldag report OUT_DIR [...]          rebuild report.html, several runs side by side
    evaldag list                          registered metrics
    evaldag cache info|ls|explain|verify|clear|prune

Benchmarks plug in through a module with ``add_arguments(parser)`` and
``build(args) -> (nodes, resources)``. Only what a command needs is imported, so a
warm rerun never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import sys
from pathlib import Path

BENCHMARKS = {
    "toy": "evaldag.benchmarks.toy_cli",
    "tofu": "evaldag.benchmarks.tofu.cli",
    "muse": "evaldag.benchmarks.muse.cli",
    "weat": "evaldag.benchmarks.weat.cli",
}


# what to pass on the command line when a graph misses one of these resources
RESOURCE_FLAGS = {"reference_model": "--reference-model DIR", "retain_model": "--retain-model DIR", "model": "--model DIR"}


def _bench_module(name: str):
    if name not in BENCHMARKS:
        raise SystemExit(f"evaldag: unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    return importlib.import_module(BENCHMARKS[name])


def _parser(benchmarks: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; the run command gains the options of each named benchmark."""
    p = argparse.ArgumentParser(prog="evaldag", description="Evaluate language models with metric graphs.")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run one or more benchmarks", conflict_handler="resolve")
    r.add_argument("benchmarks", nargs="*", default=[], help=f"benchmarks to run ({', '.join(sorted(BENCHMARKS))}); default: toy")
    r.add_argument("--out", default=None, help="output folder (default: ./evaldag-out)")
    r.add_argument("--cache-dir", default=None, help="cache folder (default: $EVALDAG_CACHE_DIR or the user cache dir)")
    r.add_argument("--metrics", default=None, help="comma-separated metric names (default: the benchmark's default set)")
    r.add_argument("-j", "--n-jobs", type=int, default=1, help="parallel CPU workers for aggregators (joblib)")
    r.add_argument("--force", action="store_true", help="recompute every node, ignoring cached node results")
    r.add_argument("--progress", action="store_true", help="show a progress bar over model tokens")
    r.add_argument("--quiet", action="store_true", help="print only errors")
    for name in benchmarks or []:
        _bench_module(name).add_arguments(r)

    d = sub.add_parser("demo", help="evaluate the three bundled checkpoints on TOFU, offline")
    importlib.import_module("evaldag.benchmarks.demo.run").add_arguments(d)

    sub.add_parser("list", help="list registered metrics")

    c = sub.add_parser("cache", help="inspect or clean the cache")
    c.add_argument("action", choices=["info", "ls", "explain", "verify", "clear", "prune"])
    c.add_argument("fingerprint", nargs="?", help="for explain: a fingerprint or prefix")
    c.add_argument("--cache-dir", default=None)
    c.add_argument("--older-than", default=None, help="for prune: e.g. 30d, 12h, 45m")
    c.add_argument("--yes", action="store_true", help="for clear: do not ask")

    from .render.cli_graph import add_graph_parser, add_report_parser

    add_graph_parser(sub, benchmarks)
    add_report_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if hasattr(signal, "SIGPIPE"):  # `evaldag ... | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # transformers prints a "Loading weights" bar per checkpoint; our own bar is --progress
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # benchmark options are added once we know which benchmarks were named, read from the
    # words after the command (so `evaldag run tofu --help` lists TOFU's options too)
    cmd, named = _command_words(argv)
    benches = (named or ["toy"]) if cmd == "run" else (named if cmd == "graph" else [])
    args = _parser([b for b in benches if b in BENCHMARKS]).parse_args(argv)
    if args.cmd == "run":
        return cmd_run(args)
    if args.cmd == "list":
        return cmd_list()
    if args.cmd in ("graph", "report"):
        from .render import cli_graph

        return cli_graph.cmd_graph(args) if args.cmd == "graph" else cli_graph.cmd_report(args)
    if args.cmd == "demo":
        return importlib.import_module("evaldag.benchmarks.demo.run").main(args)
    return cmd_cache(args)


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


def cmd_run(args: argparse.Namespace) -> int:
    from .cache import Cache
    from .graph import GraphError
    from .outputs import print_run, write
    from .resources import MissingResource
    from .run import run

    benches = args.benchmarks or ["toy"]
    nodes, resources = [], {}
    try:
        for name in benches:
            n, res = _bench_module(name).build(args)
            nodes += n
            resources.update(res)
        result = run(nodes, resources, cache=Cache(args.cache_dir), progress=args.progress,
                     batch_tokens=getattr(args, "batch_tokens", None), n_jobs=args.n_jobs, force=args.force)
    except (GraphError, MissingResource, ValueError, FileNotFoundError) as e:
        hints = [f"pass {flag}" for res, flag in RESOURCE_FLAGS.items() if f"'{res}'" in str(e)]
        print(f"evaldag: error: {e}" + (f" ({'; '.join(hints)})" if hints else ""), file=sys.stderr)
        return 2
    out = Path(args.out or "evaldag-out")
    write(result, out, bench=benches[0])
    for name in benches:  # a benchmark may write its own files too (WEAT: {query: {metric: fields}})
        hook = getattr(_bench_module(name), "write_outputs", None)
        if hook is not None:
            hook(result, out)
    from .render import write_report_html

    write_report_html([out], out / "report.html")
    if not args.quiet:
        print_run(result, out)
    return 0 if result.ok else 1


def cmd_list() -> int:
    from .declare import REGISTRY

    for m in REGISTRY.all():
        first = (m.doc.splitlines() or [""])[0]
        print(f"{m.name:34s} {m.kind:10s} v{m.version:4s} {first}")
    return 0


def _duration(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not m:
        raise SystemExit(f"evaldag: --older-than wants e.g. 30d, 12h, 45m, 10s; got {text!r}")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def cmd_cache(args: argparse.Namespace) -> int:
    from .cache import Cache

    cache = Cache(args.cache_dir)
    store = cache.nodes
    if args.action == "info":
        print(json.dumps(cache.info(), indent=2))
    elif args.action == "ls":
        for p in store.entries():
            entry = store.get(p.stem)
            meta = entry.meta if entry else {}
            print(f"{p.stem[:16]}  {p.stat().st_size:>10d}  {meta.get('node', '?')}")
    elif args.action == "explain":
        if not args.fingerprint:
            raise SystemExit("evaldag: cache explain needs a FINGERPRINT (or prefix), a node name or an id like qa_stats[216cdb]")
        return _explain(store, args.fingerprint)
    elif args.action == "verify":
        bad = cache.verify()
        for b in bad:
            print(f"corrupt: {b}")
        print(f"{len(list(store.entries()))} entries, {len(bad)} corrupt")
        return 1 if bad else 0
    elif args.action == "clear":
        if not args.yes and sys.stdin.isatty():
            if input(f"delete {cache.root}? [y/N] ").strip().lower() != "y":
                return 1
        cache.clear()
        print(f"cleared {cache.root}")
    elif args.action == "prune":
        if not args.older_than:
            raise SystemExit("evaldag: cache prune needs --older-than (e.g. 30d)")
        n = cache.prune(_duration(args.older_than))
        print(f"pruned {n} entries")
    return 0


def _explain(store, what: str) -> int:
    """Print what a stored node is made of; ``what`` is a fingerprint prefix or a name as runs print it.

    Names are matched against the name each entry was stored under: a display name
    (``forget_truth_ratio``, ``TOFU/forget_truth_ratio``) or the id of an unnamed node
    (``qa_stats[216cdb]``). A name stored by several runs (e.g. on several models) shows
    the newest entry and lists the others.
    """
    hits = store.find(what) if re.fullmatch(r"[0-9a-f]+", what) else []
    if len(hits) > 1:
        print(f"evaldag: {len(hits)} entries match {what!r}", file=sys.stderr)
        return 2
    entries = [e for e in map(store.get, hits) if e is not None]
    if not entries:
        names = {what, what.split("/", 1)[-1]}  # the store keeps the name without its group
        entries = [e for e in (store.get(p.stem) for p in store.entries()) if e is not None and e.meta.get("node") in names]
        entries.sort(key=lambda e: e.meta.get("written_at", 0.0), reverse=True)
    if not entries:
        print(f"evaldag: no cache entry has the fingerprint or name {what!r}", file=sys.stderr)
        return 2
    for other in entries[1:]:
        print(f"evaldag: also stored under {what!r}: {other.fingerprint} (older)", file=sys.stderr)
    print(json.dumps(entries[0].meta, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
