"""Lossless, pickle-free encoding of node values: a JSON skeleton plus numpy arrays.

A value is any nesting of dict (str keys), list/tuple, str, int, float (NaN and inf
included), bool, None, numpy arrays and scalars, and :class:`~evaldag.engine.results.Result`.
Arrays go to safetensors; everything else to JSON, with non-finite floats and tuples
tagged so they come back exactly. Nothing here can execute code on load.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

ARRAY = "__array__"
FLOAT = "__float__"
TUPLE = "__tuple__"
RESULT = "__result__"


class EncodeError(TypeError):
    """A node returned something the store cannot hold without pickle."""


def encode(value: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """Split ``value`` into a JSON-able skeleton and a dict of arrays."""
    arrays: dict[str, np.ndarray] = {}

    def enc(v: Any, path: str) -> Any:
        from .results import Result  # local: results imports codec helpers lazily

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
        if isinstance(v, Result):
            return {RESULT: enc(v.to_dict(), path)}
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise EncodeError(f"dict key {k!r} at {path or '/'} is not a string")
                out[k] = enc(x, f"{path}/{k}")
            if any(k in (ARRAY, FLOAT, TUPLE, RESULT) for k in out):
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
    from .results import Result

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
            if RESULT in v:
                return Result.from_dict(dec(v[RESULT]))
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
