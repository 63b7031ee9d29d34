"""The runs a cache has served, so a run can be found again: ``CACHE/runs/<time>-<id>.json``.

Why: a week later the question is "which command produced the numbers in that folder,
and which out folder did last Tuesday's run write?". Each CLI run leaves one small JSON
file in the cache it used (written atomically at the end, after its outputs): when,
the command line (as run.json's provenance holds it, secrets already redacted there),
the benchmarks, the models (path or hub id), the out folder and how many nodes were
computed, cached, failed or skipped; a run stopped by a signal records which one instead. ``evaldag cache runs`` lists them, newest last; it
only reads. A read-only cache records nothing. ``cache clear`` removes these files too.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import time
from pathlib import Path
from typing import Any, Sequence

from .cache.files import CacheWriteError, atomic_write

FOLDER = "runs"
NAME = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{8}\.json")  # what record() writes, nothing else is listed or cleared


def models_of(provenance: dict) -> dict[str, str]:
    """Model role -> path or hub id (its fingerprint when no path is recorded)."""
    res = provenance.get("resources") if isinstance(provenance.get("resources"), dict) else {}
    out = {}
    for role, fp in (provenance.get("models") or {}).items():
        desc = res.get(role) if isinstance(res.get(role), dict) else {}
        out[role] = desc.get("path") if isinstance(desc.get("path"), str) else str(fp)
    return out


def entry(result: Any, out: str | os.PathLike | None, benchmarks: Sequence[str]) -> dict:
    """What one run leaves in the cache (small: no values, no node list)."""
    prov = result.provenance or {}
    counts = {s: result.count(s) for s in ("computed", "cached", "failed", "skipped")}
    return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": prov.get("command"),
            "cwd": prov.get("cwd"), "benchmarks": list(benchmarks), "models": models_of(prov),
            "out": str(Path(out).resolve()) if out is not None else None, "nodes": counts,
            "wall_seconds": round(result.wall_seconds, 3), "evaldag": prov.get("evaldag")}


def record(cache: Any, result: Any, out: str | os.PathLike | None, benchmarks: Sequence[str] = ()) -> Path | None:
    """Write the run's entry into ``cache`` (None: a read-only cache, or it could not be written:
    the run's own outputs are already published, so a failed log line never fails the run)."""
    if getattr(cache, "read_only", False):
        return None
    return _write(cache, entry(result, out, benchmarks))


def _write(cache: Any, data: dict) -> Path | None:
    """One record, atomically, under a new name (None when it could not be written)."""
    path = Path(cache.root) / FOLDER / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}.json"
    try:
        atomic_write(path, json.dumps(data, indent=1, default=str).encode(), root=cache.root)
    except (CacheWriteError, OSError):
        return None
    return path


def record_stopped(cache: Any, command: Any, benchmarks: Sequence[str], rs: Any, out: str | os.PathLike | None,
                   signum: int) -> Path | None:
    """A run stopped by a signal leaves its record too (``stopped``: which signal); what it had
    computed is in the cache, and the same command resumes from there."""
    if getattr(cache, "read_only", False):
        return None
    models = {}
    for name, res in getattr(rs, "supplied", {}).items():
        if getattr(res, "kind", None) == "model":
            d = rs.described({name: name}).get(name) or {}
            models[name] = d.get("path") or d.get("spec") or name
    data = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": list(command) if command else None,
            "benchmarks": list(benchmarks), "models": models, "out": str(Path(out).resolve()) if out is not None else None,
            "stopped": signal.Signals(signum).name}
    return _write(cache, data)


def _order(p: Path) -> tuple:
    """Oldest first: the name's time (to the second), then the file's own time, so two runs
    ending within one second keep their order (the name's random part does not)."""
    try:
        ns = p.lstat().st_mtime_ns
    except OSError:
        ns = 0
    return p.name[:16], ns, p.name


def runs(root: str | os.PathLike) -> list[tuple[Path, dict | None]]:
    """Every recorded run under ``root``, oldest first; an unreadable file comes with None."""
    folder = Path(root) / FOLDER
    if not folder.is_dir() or folder.is_symlink():
        return []
    out: list[tuple[Path, dict | None]] = []
    for p in sorted(folder.iterdir(), key=_order):
        if not NAME.fullmatch(p.name) or p.is_symlink() or not p.is_file():
            continue
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            data = None
        out.append((p, data if isinstance(data, dict) else None))
    return out


def line(data: dict) -> str:
    """One run, one line: when, benchmarks, models, nodes, out folder, command."""
    nodes = data.get("nodes") if isinstance(data.get("nodes"), dict) else {}
    counts = f"{nodes.get('computed', 0)} computed, {nodes.get('cached', 0)} cached"
    if isinstance(data.get("stopped"), str):  # record_stopped: no counts, the signal that stopped it
        counts = f"stopped by {data['stopped']} (what it computed is cached: the same command resumes)"
    bad = ", ".join(f"{nodes[s]} {s}" for s in ("failed", "skipped") if nodes.get(s))
    models = data.get("models") if isinstance(data.get("models"), dict) else {}
    cmd = data.get("command")
    cmd = " ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd or "")
    return (f"{data.get('when', '?')}  {','.join(map(str, data.get('benchmarks') or [])) or '-'}  "
            f"{' '.join(f'{r}={m}' for r, m in models.items()) or '-'}  {counts}{', ' + bad if bad else ''}  "
            f"out={data.get('out') or '-'}  $ {cmd}")
