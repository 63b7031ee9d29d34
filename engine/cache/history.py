"""Run history: the fingerprint components each node slot had last time (for recompute reasons).

``history/<sha(name)>.json`` per slot (a display name, or a child's slot + access key).
A missing, unreadable, oversized, malformed or linked file reads as "no history" (the
reason becomes ``new``); nothing is written through a link, and a file this user cannot
read (another user's, umask 077) is left as it is.

Safe on a cache shared by many hosts as it is: each file is replaced whole by one rename
(files.py), so a reader sees one writer's record, and with jobs writing at once the last
rename wins. History only explains a recompute (``model`` rather than ``new``); it never
decides what is served, so a record from another host's job cannot make a result wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .files import LinkRefused, atomic_write, inside, refuse

MAX_BYTES = 1 << 20  # a history file is a few KB; a larger one is damaged or hostile


class History:
    def __init__(self, root: Path, read_only: bool = False):
        self.root = Path(root)
        self.dir = self.root / "history"
        self.read_only = read_only  # a read-only cache keeps the history it has

    def path(self, name: str) -> Path:
        return self.dir / (hashlib.sha256(name.encode()).hexdigest()[:32] + ".json")

    def last(self, name: str) -> dict | None:
        p = self.path(name)
        try:
            inside(self.root, p)
            if p.stat().st_size > MAX_BYTES:
                return None
            data = json.loads(p.read_text())
        except (OSError, ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None

    def remember(self, name: str, components: dict) -> None:
        if self.read_only:
            return
        p = self.path(name)
        if os.path.lexists(p) and not os.access(p, os.R_OK):  # another user's (umask 077): not ours to replace
            return
        try:
            atomic_write(self.path(name), json.dumps(components, sort_keys=True).encode(), root=self.root)
        except LinkRefused as e:
            refuse(e, "writing run history")
