"""An output folder's layout, as readers see it (no evaldag imports: render and outputs both use it).

A run's files are one *set*, kept in ``OUT/.evaldag/sets/<id>/``. ``OUT/.evaldag/current``
is a symbolic link to the published set; the names users and open-unlearning read
(``OUT/TOFU_EVAL.json``, ``OUT/run.json``, ``OUT/report.html`` …) are links that never
change, ``NAME -> .evaldag/current/NAME``. One ``rename`` of ``current`` therefore
switches every file at once: a name the new set lacks dangles (reads as absent) from
that instant, and a name the old set lacked appears. A reader that needs the whole set
from one run reads :func:`set_folder` once and takes every file from there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

META = ".evaldag"  # OUT/.evaldag/
SETS = "sets"  # OUT/.evaldag/sets/<id>/: one run's files
CURRENT = "current"  # OUT/.evaldag/current -> sets/<id>
from .render.html import REPORT_MARK  # noqa: E402  in every report.html evaldag writes (render/html.py writes it)


def link_target(name: str) -> str:
    """What a stable name in OUT points at (relative, so a copied or moved folder still reads)."""
    return f"{META}/{CURRENT}/{name}"


def set_folder(out: str | os.PathLike) -> Path:
    """The folder holding OUT's published set (resolved once), or OUT itself for a folder
    written without sets (an older evaldag, open-unlearning)."""
    out = Path(out)
    cur = out / META / CURRENT
    if cur.is_symlink() and cur.is_dir():
        return Path(os.path.realpath(cur))
    return out


def is_our_link(p: Path) -> bool:
    """A stable name evaldag made (``NAME -> .evaldag/current/NAME``)."""
    try:
        return os.readlink(p) == link_target(p.name)
    except OSError:
        return False


def is_report(p: Path) -> bool:
    """A report.html evaldag wrote (the generator mark, or an older one's footer)."""
    try:
        text = p.read_text(errors="replace")
    except OSError:
        return False
    return REPORT_MARK in text[:4096] or ("made by evaldag" in text and 'class="ed-' in text)


def is_evaldag_run_json(p: Path) -> bool:
    """``run.json`` as evaldag writes it (nodes and provenance), not any JSON of that name."""
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("nodes"), dict) and "provenance" in data
