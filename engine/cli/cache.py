"""``evaldag cache info|ls|runs|explain|verify|clear|prune|merge``.

``info``, ``ls``, ``explain`` and ``verify`` (without ``--repair``) open the cache to look
at it (``Cache(..., inspect=True)``): they never delete, move or write anything, a corrupt
entry included. Every action refuses a folder without the cache marker (one line, exit 2).
Entries in a newer evaldag's format and entries this user cannot read are their own
states: listed and counted as such, never as corrupt, never removed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from ..cache import Cache, CorruptWeights, NotACache
from ..cache.weights import describe
from ..cache.safety import require_marker
from ..cache.deep import verify_deep
from .. import runlog
from . import cache_merge


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = sub.add_parser("cache", help="inspect or clean the cache")
    c.add_argument("action", choices=["info", "ls", "runs", "explain", "verify", "clear", "prune", "merge"],
                   help="runs: the runs recorded in this cache (when, command, benchmarks, models, out folder, nodes); "
                        "merge SRC...: copy into --cache-dir what the caches SRC hold and it lacks (per-job caches)")
    c.add_argument("fingerprint", nargs="*", metavar="WHAT",
                   help="for explain: a fingerprint or prefix, a node name or an id like qa_stats[216cdb]; "
                        "for merge: the source cache folders")
    c.add_argument("--cache-dir", default=None)
    c.add_argument("--older-than", default=None, help="for prune: e.g. 30d, 12h, 45m")
    c.add_argument("--yes", action="store_true", help="for clear: do not ask")
    c.add_argument("--deep", action="store_true", help="for verify: also recompute a sample of entries and compare")
    c.add_argument("--sample", type=int, default=50, help="for verify --deep: how many entries to recompute")
    c.add_argument("--repair", action="store_true", help="for verify: remove bad entries, rebuild a damaged request database")
    return c


def clear(args: argparse.Namespace, cache: Cache) -> int:
    """Ask first (a terminal) or need --yes (no terminal: a pipe's "n" must not clear)."""
    if not args.yes:
        if not sys.stdin.isatty():
            print("evaldag: error: cache clear needs --yes when not run from a terminal; nothing removed", file=sys.stderr)
            return 2
        if input(f"delete the entries of the cache {cache.root}? [y/N] ").strip().lower() != "y":
            return 1
    removed, left = cache.clear()
    print(f"cleared {cache.root}: {removed} files removed")
    for k in cache.kept:
        print(f"left alone: {k}")
    if left:
        shown = ", ".join(str(p) for p in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        print(f"left {len(left)} paths the cache did not write: {shown}")
    return 0


def verify(cache: Cache, args: argparse.Namespace) -> int:
    """Checksums, names and types of every entry and the request database; ``--deep`` recomputes a sample."""
    bad = cache.verify()
    for b in bad:
        print(f"corrupt: {b}")
    kept = list(cache.nodes.left.values())
    newer = [k for k in kept if "newer than this evaldag" in k]
    unread = [k for k in kept if k not in newer] + [f"{p}: folder not listable" for p in cache.nodes.unlisted]
    if cache.requests.unreadable():
        unread.append(f"{cache.requests.path}: {cache.requests.unreadable()}")
    for k in newer:
        print(f"newer format, left alone: {k}")
    for k in unread:
        print(f"unreadable, left alone: {k}")
    extra = (f", {len(newer)} in a newer format (left alone)" if newer else "") + \
            (f", {len(unread)} unreadable (left alone)" if unread else "")
    print(f"{len(list(cache.nodes.entries()))} entries, {len(bad)} corrupt{extra}")
    if args.repair and bad:
        for line in Cache(cache.root).repair():
            print(line)
    differ = []
    if args.deep:
        rep = verify_deep(cache.nodes, sample=args.sample)
        differ = rep.differ
        for d in differ:
            print(f"differs: {d}")
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(rep.not_checkable.items()))
        print(f"deep: {rep.checked} recomputed, {len(differ)} differ" + (f"; not checkable here: {skipped}" if skipped else ""))
    return 1 if (bad and not args.repair) or differ else 0


def list_runs(cache: Cache) -> int:
    """``cache runs``: one line per recorded run, oldest first (engine/runlog.py); reads only."""
    found = runlog.runs(cache.root)
    for path, data in found:
        print(runlog.line(data) if data is not None else f"{path.name}: unreadable, left alone")
    if not found:
        print(f"evaldag: no runs recorded in {cache.root} (each `evaldag run` records itself there)", file=sys.stderr)
    return 0


def duration(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not m:
        raise SystemExit(f"evaldag: --older-than wants e.g. 30d, 12h, 45m, 10s; got {text!r}")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


LOOK = ("info", "ls", "runs", "explain", "verify")  # actions that only look: opened read-only, nothing changed


def cmd(args: argparse.Namespace) -> int:
    if args.action == "merge":
        return cache_merge.merge(args)
    if len(args.fingerprint) > 1:
        print(f"evaldag: error: cache {args.action} takes at most one WHAT, got {len(args.fingerprint)}", file=sys.stderr)
        return 2
    what = args.fingerprint[0] if args.fingerprint else None
    try:
        cache = Cache(args.cache_dir, inspect=args.action in LOOK)
        if args.action in LOOK and not cache.root.exists() and not cache.root.is_symlink():
            return _no_cache_yet(args.action, cache.root)
        if args.action in LOOK:
            require_marker(cache.root)
        return _action(args, cache, what)
    except NotACache as e:  # not a cache folder, an empty path
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2


def _no_cache_yet(action: str, root) -> int:
    """A cache that does not exist yet is empty, not an error: the default one before the first run."""
    if action == "info":
        print(json.dumps({"root": str(root), "nodes": 0, "node_bytes": 0, "requests": 0, "request_bytes": 0}, indent=2))
    print(f"evaldag: the cache {root} is empty: it does not exist yet (the first `evaldag run` makes it)", file=sys.stderr)
    return 0


def _action(args: argparse.Namespace, cache: Cache, what: str | None) -> int:
    store = cache.nodes
    if args.action == "info":
        print(json.dumps(cache.info(), indent=2))
    elif args.action == "ls":
        counts: dict[str, int] = {}
        for p, state, got in store.survey():
            counts[state] = counts.get(state, 0) + 1
            what = got.meta.get("node", "?") if state == "ok" else f"({state}: {str(got).split(': ', 1)[-1]})"
            print(f"{p.stem[:16]}  {p.lstat().st_size:>10d}  {what}")
        for folder, state, body in cache.weights.survey():  # trained weights of derived models (a relearn)
            counts[state] = counts.get(state, 0) + 1
            what = describe(body) if state == "ok" else f"({state}: {body}) [weights]"
            print(f"{folder.name[:16]}  {cache.weights.nbytes(folder):>10d}  {what}")
        for d in store.unlisted:
            print(f"evaldag: cannot list {d} (permission denied): its entries are not shown", file=sys.stderr)
        if set(counts) - {"ok"}:
            print("evaldag: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "ok")
                  + " entries listed as such, left alone", file=sys.stderr)
    elif args.action == "runs":
        return list_runs(cache)
    elif args.action == "explain":
        if not what:
            raise SystemExit("evaldag: cache explain needs a FINGERPRINT (or prefix), a node name or an id like qa_stats[216cdb]")
        weights = [d for d in cache.weights.entries() if d.name.startswith(what)] if re.fullmatch(r"[0-9a-f]+", what) else []
        if weights:
            return explain_weights(cache, weights, what)
        return explain(store, what)
    elif args.action == "verify":
        return verify(cache, args)
    elif args.action == "clear":
        return clear(args, cache)
    elif args.action == "prune":
        if not args.older_than:
            raise SystemExit("evaldag: cache prune needs --older-than (e.g. 30d)")
        n = cache.prune(duration(args.older_than))
        print(f"pruned {n} entries")
        for k in cache.nodes.left.values():
            print(f"left alone: {k}")
    return 0


def explain(store, what: str) -> int:
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
        held = [store.left[h] for h in hits if h in store.left]  # a newer evaldag's, or unreadable: say which
        print(f"evaldag: {held[0]}; left alone" if held else f"evaldag: no cache entry has the fingerprint or name {what!r}",
              file=sys.stderr)
        return 2
    for other in entries[1:]:
        print(f"evaldag: also stored under {what!r}: {other.fingerprint} (older)", file=sys.stderr)
    meta = dict(entries[0].meta)
    meta["reads"] = reads_of(store, meta)
    print(json.dumps(meta, indent=2, sort_keys=True))
    return 0


def explain_weights(cache: Cache, folders: list, what: str) -> int:
    """``cache explain KEY`` of a stored trained-weights folder: its manifest (what trained it, the
    recipe, the steps, the parent model, each file's size and sha256)."""
    if len(folders) > 1:
        print(f"evaldag: {len(folders)} stored weights match {what!r}", file=sys.stderr)
        return 2
    try:
        body = cache.weights.manifest(folders[0].name)
    except CorruptWeights as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"weights": str(folders[0]), **(body or {})}, indent=2, sort_keys=True, default=str))
    return 0


def reads_of(store, meta: dict) -> dict:
    """The model and data an entry was computed from: its own ``reads`` and its parents' (an
    aggregator reads no resource itself; its scorers do), found through the stored parents."""
    out, seen, todo = {}, set(), [meta]
    while todo:
        m = todo.pop()
        out.update({k: v for k, v in (m.get("reads") or {}).items() if k not in out})
        for fp in ((m.get("components") or {}).get("parents") or {}).values():
            if isinstance(fp, str) and fp not in seen:
                seen.add(fp)
                parent = store.get(fp)
                if parent is not None:
                    todo.append(parent.meta)
    return out
