"""Strict fingerprints: a node's identity is a hash of what determines its value.

``fingerprint(components)`` = sha256 over canonical JSON of: metric name, version,
canonical params, parents' fingerprints in key order, and the fingerprints of the
resources the node reads (under the names the node reads them by). Values are hashed
with a type tag; arrays and tensors as dtype + shape + bytes; anything we do not know
how to hash deterministically is an error, never a silent constant or a pickle.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

import numpy as np
from pydantic import BaseModel

ENGINE_SCHEMA = "evaldag-1"


class FingerprintError(TypeError):
    """A value cannot be hashed deterministically."""


def _update(h: "hashlib._Hash", obj: Any, path: str) -> None:
    if hasattr(obj, "__fingerprint__"):
        h.update(b"F")
        h.update(str(obj.__fingerprint__()).encode())
    elif obj is None:
        h.update(b"N")
    elif isinstance(obj, (bool, np.bool_)):
        h.update(b"T" if obj else b"f")
    elif isinstance(obj, (int, np.integer)):
        h.update(b"i" + str(int(obj)).encode() + b";")
    elif isinstance(obj, (float, np.floating)):
        f = float(obj)
        h.update(b"d" + (repr(f) if math.isfinite(f) or math.isnan(f) else repr(f)).encode() + b";")
    elif isinstance(obj, str):
        b = obj.encode()
        h.update(b"s" + str(len(b)).encode() + b":" + b)
    elif isinstance(obj, bytes):
        h.update(b"b" + str(len(obj)).encode() + b":" + obj)
    elif isinstance(obj, np.ndarray):
        if obj.dtype.kind == "O":
            raise FingerprintError(f"object array at {path or '/'} cannot be fingerprinted")
        a = np.ascontiguousarray(obj)
        h.update(f"A{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    elif type(obj).__module__.startswith("torch") and type(obj).__name__ in ("Tensor", "Parameter"):
        _update(h, tensor_bytes(obj), path)
    elif isinstance(obj, BaseModel):
        h.update(b"P" + type(obj).__name__.encode())
        _update(h, obj.model_dump(mode="json"), path)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(b"D" + type(obj).__name__.encode())
        _update(h, {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}, path)
    elif isinstance(obj, dict):
        h.update(b"{" + str(len(obj)).encode())
        for k in sorted(obj, key=lambda k: (type(k).__name__, str(k))):
            _update(h, k, path)
            _update(h, obj[k], f"{path}/{k}")
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update((b"[" if isinstance(obj, list) else b"(") + str(len(obj)).encode())
        for i, x in enumerate(obj):
            _update(h, x, f"{path}/{i}")
        h.update(b"]")
    else:
        raise FingerprintError(
            f"cannot fingerprint a {type(obj).__module__}.{type(obj).__name__} at {path or '/'}: "
            "give it a __fingerprint__() method or pass plain data"
        )


def hash_value(obj: Any) -> str:
    """Strict, type-tagged sha256 of a value."""
    h = hashlib.sha256()
    _update(h, obj, "")
    return h.hexdigest()


def tensor_bytes(t: Any) -> np.ndarray:
    """A torch tensor as a numpy array of its exact bytes (bf16 viewed as uint16)."""
    import torch

    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy() if hasattr(torch, "uint16") else t.view(torch.int16).numpy()
    return t.numpy()


def canonical_params(params: BaseModel) -> Any:
    """Params as JSON-ready data (validated, defaults filled) for hashing and explain()."""
    return json.loads(params.model_dump_json())


def components(metric: str, version: str, params: Any, parents: dict[str, str], resources: dict[str, str]) -> dict:
    """Everything a node's fingerprint is made of, in a form explain() can show and diff."""
    return {
        "engine": ENGINE_SCHEMA,
        "metric": metric,
        "version": version,
        "params": params,
        "parents": dict(sorted(parents.items())),
        "resources": dict(sorted(resources.items())),
    }


def digest(comps: dict) -> str:
    return hash_value(comps)
