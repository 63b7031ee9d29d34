"""``evaldag cache merge SRC... --cache-dir DEST``: fold per-job caches into one (cache/merge.py).

Every source is checked before anything is copied (a cache folder with the marker, not the
destination itself): a bad one is one ``evaldag: error:`` line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..cache import Cache, NotACache
from ..cache.merge import merge_one
from ..cache.safety import require_marker


def merge(args: argparse.Namespace) -> int:
    sources = [Path(s).expanduser() for s in args.fingerprint]
    if not sources:
        print("evaldag: error: cache merge needs at least one SRC cache folder (evaldag cache merge SRC... "
              "--cache-dir DEST)", file=sys.stderr)
        return 2
    try:
        dest = Cache(args.cache_dir)
        for src in sources:
            if not src.is_dir():
                raise NotACache(f"cache merge: no such cache folder {src}")
            if dest.root.exists() and os.path.samefile(src, dest.root):  # through a link too
                raise NotACache(f"cache merge: {src} and the destination --cache-dir {args.cache_dir or dest.root} "
                                "are the same folder; nothing merged")
            require_marker(src)
        if dest.read_only:
            raise NotACache(f"cache merge: the destination {dest.root} is read-only; give a writable --cache-dir")
        dest.claim()  # a new, empty or marked folder only
    except NotACache as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    skipped = 0
    for src in sources:
        got = merge_one(dest.root, src)
        print(got.line(src))
        for why in got.skipped:
            print(f"skipped: {why}")
        skipped += len(got.skipped)
    return 1 if skipped else 0
