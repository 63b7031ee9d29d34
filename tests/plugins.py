"""Install a package the way pip leaves it on disk, for tests of entry-point plugins."""

from __future__ import annotations

import os
from pathlib import Path


def install(site: Path, name: str, modules: dict[str, str], entry_points: str) -> dict[str, str]:
    """Write ``modules`` (file name -> source) and a ``<name>-0.1.dist-info`` with ``entry_points``
    (entry_points.txt text) into ``site``; return an environment with ``site`` on PYTHONPATH."""
    site.mkdir(parents=True, exist_ok=True)
    for file, source in modules.items():
        (site / file).write_text(source)
    dist = site / f"{name}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(entry_points)
    return {**os.environ, "PYTHONPATH": str(site)}
