"""What ranks send each other: a JSON header, then checksummed safetensors payloads.

Each payload is packed exactly as the cache stores it (``cache.codec.pack``: arrays in
safetensors, a JSON skeleton, a sha256 over both), so a receiver verifies what it got
and never unpickles anything.
"""

from __future__ import annotations

import json
from typing import Any

from ..cache import Entry
from ..cache.codec import pack, unpack
from ..requests import RESULT_TYPES


def frame(header: dict, payloads: dict[str, bytes]) -> bytes:
    head = json.dumps({**header, "items": [[key, len(p)] for key, p in payloads.items()]}).encode()
    return len(head).to_bytes(8, "little") + head + b"".join(payloads.values())


def unframe(blob: bytes) -> tuple[dict, dict[str, bytes]]:
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + n])
    pos, out = 8 + n, {}
    for key, size in header["items"]:
        out[key] = blob[pos : pos + size]
        pos += size
    return header, out


def encode_results(kind: str, results: dict, err: BaseException | None, counts: dict) -> bytes:
    """One rank's share of a request group: results by request key, its counters, its error."""
    payloads = {key: pack(r.to_arrays(), r.meta() if hasattr(r, "meta") else {}) for key, r in results.items()}
    return frame({"kind": kind, "error": None if err is None else f"{type(err).__name__}: {err}", "counts": counts},
                 payloads)


def decode_results(kind: str, blob: bytes, where: str) -> tuple[dict, dict[str, Any]]:
    header, payloads = unframe(blob)
    out = {}
    for key, data in payloads.items():
        value, meta = unpack(data, where=f"{where}:{key[:12]}")
        out[key] = RESULT_TYPES[kind].from_arrays(value, meta)
    return header, out


def encode_entries(entries: dict[str, Entry]) -> bytes:
    """Node entries by fingerprint (rank 0's cached nodes, for ranks that cannot read the store)."""
    return frame({}, {fp: pack(e.value, e.meta) for fp, e in entries.items()})


def decode_entries(blob: bytes, where: str) -> dict[str, Entry]:
    out = {}
    for fp, data in unframe(blob)[1].items():
        value, meta = unpack(data, where=f"{where}:{fp[:12]}")
        out[fp] = Entry(fp, value, meta)
    return out
