"""``evaldag cache merge SRC...``: fold per-job caches into one.

A job array can give each job a cache of its own (on local disk, or layered over a shared
read-only one with ``--cache-read-from``); merging brings their work back into one cache.
Everything a cache holds that matters is content-addressed, so merging is copying what the
destination lacks, never choosing between two versions:

* node entries (``objects/``): each source entry is read and checked (checksum, name, type)
  before it is copied under the same name; a corrupt one is skipped and counted, one in a
  newer evaldag's format is skipped and counted, one the destination has is left;
* request results: each batch file is checked against its name and copied under it; an
  older evaldag's ``requests.sqlite`` in a source is read (never changed) and written as
  batch files;
* trained weights (``weights/``, a relearn's): each folder's files checked against its manifest,
  then stored in the destination whole (weights.py), under the same key;
* history and run records: copied where the destination has none of that name (history
  only explains recomputes, so the destination's own record wins).

Sources are only read. Every copy is an atomic write into the destination (files.py), so
a merge killed half-way leaves whole entries only, and running it again finishes it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import batches
from .codec import CorruptEntry, NewerFormat, unpack
from .files import LinkRefused, LinkWarning, atomic_write, inside, is_temp, walk_files
from .nodes import NodeStore, check_entry, read_checked
from .safety import require_marker
from .weights import CorruptWeights, WeightStore


@dataclass
class Merged:
    """What a merge did, per kind of entry."""

    nodes: int = 0
    nodes_present: int = 0
    batches: int = 0
    batches_present: int = 0
    legacy_rows: int = 0
    other: int = 0  # history and run records copied
    weights: int = 0  # stored trained-weights folders (weights.py) copied
    weights_present: int = 0
    skipped: list[str] = field(default_factory=list)  # "path: why" of each entry not copied

    def line(self, src: Path) -> str:
        return (f"merged {src}: {self.nodes} node entries copied ({self.nodes_present} already there), "
                f"{self.batches} request batch files copied ({self.batches_present} already there)"
                + (f", {self.legacy_rows} answers from its requests.sqlite" if self.legacy_rows else "")
                + (f", {self.weights} trained-weights folders copied ({self.weights_present} already there)"
                   if self.weights or self.weights_present else "")
                + f", {self.other} history and run records; {len(self.skipped)} skipped")


def _copy(src_root: Path, src: Path, dest_root: Path, dest: Path, data: bytes | None = None) -> None:
    inside(src_root, src)
    atomic_write(dest, src.read_bytes() if data is None else data, root=dest_root)


LINK = "a symbolic link, not followed (the cache never follows a link it did not create)"


def merge_one(dest: Path, src: Path) -> Merged:
    """Copy into the cache ``dest`` what the cache ``src`` holds and ``dest`` lacks (``src`` is
    only read). A link in ``src`` is never followed: it is skipped and counted like a damaged
    entry, its path said in the merge's own lines rather than as a Python warning."""
    require_marker(src)
    got = Merged()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", LinkWarning)
        _merge(dest, src, got)
    for w in seen:
        if issubclass(w.category, LinkWarning) and getattr(w.message, "path", None):
            got.skipped.append(f"{w.message.path}: {LINK}")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return got


def _merge(dest: Path, src: Path, got: Merged) -> None:
    store, into = NodeStore(src, read_only=True), NodeStore(dest)
    for p in store.entries():
        fp = p.stem
        if into.path(fp).exists():
            got.nodes_present += 1
            continue
        try:
            data = read_checked(p)
            value, meta = unpack(data, where=str(p))
            check_entry(fp, value, meta, str(p))
        except NewerFormat as e:
            got.skipped.append(f"{p}: {e} (a newer evaldag's: merge it with that evaldag)")
            continue
        except (CorruptEntry, OSError, LinkRefused) as e:
            got.skipped.append(f"{p}: {e}")
            continue
        _copy(src, p, dest, into.path(fp), data)
        got.nodes += 1
    got.skipped += [f"{p}: {LINK}" for p in batches.links(src)]
    for folder in batches.model_dirs(src):
        for name in batches.names(folder):
            target = dest / batches.FOLDER / folder.name / name
            if target.exists():
                got.batches_present += 1
                continue
            try:
                data = (folder / name).read_bytes()
                batches.parse(folder / name, data)
            except (batches.BadBatch, OSError) as e:
                got.skipped.append(f"{folder / name}: {e}")
                continue
            atomic_write(target, data, root=dest)
            got.batches += 1
    for model, rows, written in batches.legacy_batches(src):
        batches.write(dest, model, rows, written=written)
        got.legacy_rows += len(rows)
    theirs, ours = WeightStore(src, read_only=True), WeightStore(dest)
    for folder in theirs.entries():
        try:
            if theirs.copy_into(ours, folder):
                got.weights += 1
            else:
                got.weights_present += 1
        except (CorruptWeights, OSError) as e:
            got.skipped.append(f"{folder}: {e}")
    for sub in ("history", "runs"):
        for p in walk_files(src, src / sub):
            target = dest / sub / p.name
            if p.parent == src / sub and not is_temp(p) and not target.exists():
                _copy(src, p, dest, target)
                got.other += 1
