"""Fingerprint aliases: "this saved folder holds the same weights as that in-memory model".

A model evaluated in memory during training (``integrations/``) is fingerprinted from its
tensors' contents (``hf-mem-1``); the folder the Trainer saves at that step is
fingerprinted from its files' bytes (``hf-dir-1``). The two schemes name the same
weights differently, so a later ``evaldag run --model checkpoint-N`` would find nothing
cached. When the Trainer saves, the callback checks every saved tensor against the one in
memory and, only if all are equal, records here that the folder's fingerprint stands for
the in-memory one; :func:`resolve` then hands the folder's ``HFModel`` the in-memory
fingerprint, and every node and request the callback stored is found.

Why an alias and not one scheme over tensor contents: hashing tensors read from
safetensors would have to reproduce the in-memory state dict's names, tied weights,
config and tokenizer serialization exactly, and changing a scheme recomputes every
existing cache once. The alias changes nothing for folders nobody aliased, and it is
recorded only after the tensors were compared, so it cannot name different weights.

``<root>/aliases/<folder fingerprint>.json``: ``{"format", "folder", "memory", "path",
"checksum"}``, written atomically; a record whose checksum or key does not match is
ignored (with a warning), so a damaged record costs a recomputation, never a wrong hit.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path

from .filehash import active_memo
from .files import atomic_write, inside

FOLDER = "aliases"
FORMAT = 1
_FP = re.compile(r"[0-9a-f]{64}")


def _checksum(rec: dict) -> str:
    body = {k: rec[k] for k in ("format", "folder", "memory", "path")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def record(root: str | Path, folder_fp: str, memory_fp: str, path: str) -> Path:
    """Record that ``folder_fp`` (a saved folder's) names the weights of ``memory_fp``."""
    if not (_FP.fullmatch(folder_fp) and _FP.fullmatch(memory_fp)):
        raise ValueError(f"alias: fingerprints must be sha256 hex digests, not {folder_fp!r} -> {memory_fp!r}")
    root = Path(root)
    rec = {"format": FORMAT, "folder": folder_fp, "memory": memory_fp, "path": str(path)}
    rec["checksum"] = _checksum(rec)
    dest = root / FOLDER / f"{folder_fp}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dest, json.dumps(rec, sort_keys=True).encode(), root=root)
    return dest


def lookup(root: str | Path, folder_fp: str) -> str | None:
    """The in-memory fingerprint recorded for ``folder_fp`` under ``root``, or None."""
    path = Path(root) / FOLDER / f"{folder_fp}.json"
    try:
        inside(Path(root), path)
        rec = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:
        warnings.warn(f"alias {path} ignored: {e}", stacklevel=2)
        return None
    ok = (isinstance(rec, dict) and rec.get("format") == FORMAT and rec.get("folder") == folder_fp
          and isinstance(rec.get("memory"), str) and _FP.fullmatch(rec["memory"]) is not None
          and isinstance(rec.get("path"), str) and rec.get("checksum") == _checksum(rec))
    if not ok:
        warnings.warn(f"alias {path} ignored: damaged (checksum or fields do not match)", stacklevel=2)
        return None
    return rec["memory"]


def resolve(folder_fp: str) -> str:
    """``folder_fp``, or the in-memory fingerprint the running cache aliased it to."""
    memo = active_memo()
    if memo is None:
        return folder_fp
    return lookup(memo.root, folder_fp) or folder_fp
