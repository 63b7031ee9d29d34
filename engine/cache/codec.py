"""Lossless, pickle-free encoding of values: a JSON skeleton plus numpy arrays.

A value is any nesting of dict (str keys), list/tuple, str, int, float (NaN and inf
included), bool, None, numpy arrays and scalars, and any class registered with
:func:`register` (``Result`` registers itself in ``engine/results.py``). Arrays go to
safetensors; everything else to JSON, with non-finite floats and tuples tagged so they
come back exactly. :func:`pack`/:func:`unpack` turn a value and its metadata into one
checksummed safetensors blob, the format of both the node store and the request store.
Nothing here can execute code on load.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from typing import Any, Callable

import numpy as np

ARRAY = "__array__"
FLOAT = "__float__"
TUPLE = "__tuple__"
FORMAT = "evaldag-node-1"
# an entry's JSON header is small; anything claiming more is hostile or damaged
MAX_HEADER_BYTES = 64 << 20

# tag -> (class, to plain data, from plain data); see register()
_TYPES: dict[str, tuple[type, Callable[[Any], Any], Callable[[Any], Any]]] = {}


class EncodeError(TypeError):
    """A node returned something the store cannot hold without pickle."""


class CorruptEntry(Exception):
    """An entry failed its checksum, does not match what was asked, or could not be parsed."""


class NewerFormat(Exception):
    """An entry in a format newer than this evaldag's (``evaldag-node-2`` and on), as a newer
    evaldag sharing the cache writes it: it is not ours to judge, so it is skipped, reported
    and never deleted or overwritten."""


def _newer(fmt: object) -> bool:
    m = re.fullmatch(r"evaldag-node-(\d{1,6})", fmt) if isinstance(fmt, str) else None
    return m is not None and int(m.group(1)) > int(FORMAT.rsplit("-", 1)[1])


class CorruptEntryWarning(UserWarning):
    """A cache entry was corrupt; it was discarded and will be recomputed."""


def register(tag: str, cls: type, to_data: Callable[[Any], Any], from_data: Callable[[Any], Any]) -> None:
    """Let the codec store instances of ``cls`` as ``{tag: to_data(x)}`` (plain data inside)."""
    _TYPES[tag] = (cls, to_data, from_data)


def _reserved() -> tuple[str, ...]:
    return (ARRAY, FLOAT, TUPLE, *_TYPES)


def encode(value: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """Split ``value`` into a JSON-able skeleton and a dict of arrays."""
    arrays: dict[str, np.ndarray] = {}

    def enc(v: Any, path: str) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return int(v)
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, (float, np.floating)):
            f = float(v)
            return f if math.isfinite(f) else {FLOAT: repr(f)}
        if isinstance(v, np.ndarray):
            if v.dtype.kind in "OUS":
                return {TUPLE: False, "list": [enc(x, f"{path}/{i}") for i, x in enumerate(v.tolist())]}
            name = f"a{len(arrays)}"
            arrays[name] = np.ascontiguousarray(v)
            return {ARRAY: name}
        for tag, (cls, to_data, _) in _TYPES.items():
            if isinstance(v, cls):
                return {tag: enc(to_data(v), path)}
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise EncodeError(f"dict key {k!r} at {path or '/'} is not a string")
                out[k] = enc(x, f"{path}/{k}")
            if any(k in _reserved() for k in out):
                raise EncodeError(f"reserved key in dict at {path or '/'}")
            return out
        if isinstance(v, tuple):
            return {TUPLE: True, "list": [enc(x, f"{path}/{i}") for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [enc(x, f"{path}/{i}") for i, x in enumerate(v)]
        raise EncodeError(f"cannot store a {type(v).__name__} at {path or '/'} (no pickle, by design)")

    return enc(value, ""), arrays


def decode(skeleton: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of :func:`encode`."""

    def dec(v: Any) -> Any:
        if isinstance(v, list):
            return [dec(x) for x in v]
        if isinstance(v, dict):
            if ARRAY in v:
                return arrays[v[ARRAY]]
            if FLOAT in v:
                return float(v[FLOAT])
            if TUPLE in v:
                items = [dec(x) for x in v["list"]]
                return tuple(items) if v[TUPLE] else items
            for tag, (_, _, from_data) in _TYPES.items():
                if tag in v:
                    return from_data(dec(v[tag]))
            return {k: dec(x) for k, x in v.items()}
        return v

    return dec(skeleton)


def checksum(skeleton_json: str, meta_json: str, arrays: dict[str, np.ndarray]) -> str:
    """sha256 over the JSON parts and every array's name, dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(skeleton_json.encode())
    h.update(b"\0")
    h.update(meta_json.encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\0{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def dumps(obj: Any) -> str:
    """Canonical JSON (sorted keys, no whitespace) for hashing and metadata."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def pack(value: Any, meta: dict) -> bytes:
    """Serialise a value and its metadata into safetensors bytes with a checksum."""
    from safetensors.numpy import save  # safetensors' numpy half: imported where used, a warm path may skip it

    skeleton, arrays = encode(value)
    # key order is part of the value (WEFE's per-word dicts are ordered): keep it
    skeleton_json = json.dumps(skeleton, separators=(",", ":"))
    meta_json = json.dumps(meta, sort_keys=True, separators=(",", ":"), default=str)
    digest = checksum(skeleton_json, meta_json, arrays)
    return save(arrays, metadata={"format": FORMAT, "skeleton": skeleton_json, "meta": meta_json, "sha256": digest})


def loads_bounded(text: str | bytes, where: str) -> Any:
    """``json.loads`` that turns absurd nesting (RecursionError) or bad text into :class:`CorruptEntry`."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CorruptEntry(f"{where}: not JSON ({type(e).__name__})") from None


def unpack(data: bytes, where: str = "") -> tuple[Any, dict]:
    """Inverse of :func:`pack`; raises :class:`CorruptEntry` on any mismatch."""
    from safetensors.numpy import load

    try:
        header_len = int.from_bytes(data[:8], "little")
        if len(data) < 8 or header_len > min(MAX_HEADER_BYTES, len(data) - 8):
            raise CorruptEntry(f"{where}: unreadable (header length {header_len} exceeds the entry, {len(data)} bytes)")
        header = loads_bounded(data[8 : 8 + header_len], where)
        md = header["__metadata__"]
        if _newer(md.get("format")):
            raise NewerFormat(f"{where}: format {md.get('format')!r}, newer than this evaldag's {FORMAT!r}")
        if md.get("format") != FORMAT:
            raise CorruptEntry(f"{where}: unknown format {md.get('format')!r}")
        arrays = load(data)
        if checksum(md["skeleton"], md["meta"], arrays) != md["sha256"]:
            raise CorruptEntry(f"{where}: checksum mismatch")
        skeleton, meta = loads_bounded(md["skeleton"], where), loads_bounded(md["meta"], where)
        if not isinstance(meta, dict):
            raise CorruptEntry(f"{where}: metadata is not an object")
        return decode(skeleton, arrays), meta
    except (CorruptEntry, NewerFormat):
        raise
    except Exception as e:  # truncated, not JSON, not safetensors, a skeleton naming a missing array...
        raise CorruptEntry(f"{where}: unreadable ({type(e).__name__}: {e})") from None


def leave_reason(path: "os.PathLike | str") -> str | None:
    """Why a maintenance pass (clear, prune, a run's repair) must leave the entry file at ``path``
    alone, reading only its header: ``"unreadable (...)"`` when this user cannot open it (another
    user's cache under umask 077), ``"newer format ..."`` when a newer evaldag wrote it; None
    when it is ours to judge (valid, corrupt or gone)."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if not 0 < n <= MAX_HEADER_BYTES:
                return None
            md = json.loads(f.read(n)).get("__metadata__", {})
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    except (ValueError, RecursionError, AttributeError):
        return None
    fmt = md.get("format") if isinstance(md, dict) else None
    return f"newer format {fmt!r}" if _newer(fmt) else None
