"""Strict fingerprints: a node's identity is a hash of what determines its value.

``fingerprint(components)`` = sha256 over canonical JSON of: metric name, version,
the metric's code identity (:func:`code_identity`), canonical params, parents'
fingerprints in key order, and the fingerprints of the resources the node reads
(under the names the node reads them by). Values are hashed
with a type tag; arrays and tensors as dtype + shape + bytes; anything we do not know
how to hash deterministically is an error, never a silent constant or a pickle.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import math
import textwrap
import types
from typing import Any

import numpy as np
from pydantic import BaseModel

# Heavy import: torch (only to read a tensor's bytes), inside the function that needs it.

ENGINE_SCHEMA = "evaldag-2"  # 2: components gained "code"


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


def components(metric: str, version: str, params: Any, parents: dict[str, str], resources: dict[str, str],
               code: str = "", execution: str | None = None) -> dict:
    """Everything a node's fingerprint is made of, in a form explain() can show and diff.

    ``execution`` (``"deterministic"`` for a scorer under ``--deterministic``) keeps such
    results apart from batched ones; absent by default, so default fingerprints do not move.
    """
    return {
        **({"execution": execution} if execution else {}),
        "engine": ENGINE_SCHEMA,
        "metric": metric,
        "version": version,
        "code": code,
        "params": params,
        "parents": dict(sorted(parents.items())),
        "resources": dict(sorted(resources.items())),
    }


def digest(comps: dict) -> str:
    return hash_value(comps)


# ---------------------------------------------------------------------------- code identity


def code_identity(fn: Any) -> str:
    """A hash of what a metric's function does, so an edited function is recomputed.

    ``src:<sha>``: the function's source (for a method of a class, e.g. a ``Metric``
    subclass's ``compute``, the whole class), parsed and unparsed, with decorators and
    docstrings dropped: comments, blank lines, formatting and docstrings do not count.
    ``code:<sha>``: where there is no source (a lambda, a function typed into a REPL or
    built with ``exec``), the bytecode: ``co_code``, constants and names, nested code
    included; that hash also changes with the Python version. ``name:<module.qualname>``
    for a callable with neither (e.g. a ``functools.partial``): only ``version`` then
    protects its cached values. A function of a module registered with
    :func:`identify_by_file` (a metric file imported by its path) is identified by that
    whole file as well (``+file:<sha>``), so its helpers and constants count; elsewhere the
    helpers a function calls are not hashed: bump ``version`` when one of them changes
    what the metric returns.
    """
    target = type(fn.__self__) if inspect.ismethod(fn) else fn
    own = _own_identity(target)
    whole = _FILE_CODE.get(getattr(target, "__module__", None) or "")
    return f"{own}+{whole}" if whole else own


#: module name -> ``file:<sha>`` of the whole file it was imported from (identify_by_file)
_FILE_CODE: dict[str, str] = {}


def identify_by_file(module: str, source: str) -> None:
    """Make the code of the whole file ``source`` part of the identity of every function of
    ``module``: for a file imported by its path (``--add-metric ./my.py``) whose metric calls
    helpers, constants and classes of that file. Comments, docstrings and formatting aside."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        _FILE_CODE[module] = "file:" + _sha(source)
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            _drop_docstring(node)
    _FILE_CODE[module] = "file:" + _sha(ast.unparse(tree))


def _own_identity(target: Any) -> str:
    if getattr(target, "__name__", "") != "<lambda>":
        try:
            return "src:" + _sha(_normalised_source(target))
        except (OSError, TypeError, SyntaxError, IndexError):
            pass
    codes = _code_objects(target)
    if codes:
        h = hashlib.sha256()
        for code in codes:
            _update_code(h, code)
        return "code:" + h.hexdigest()[:32]
    return f"name:{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _normalised_source(obj: Any) -> str:
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    first = tree.body[0]
    if not isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        raise SyntaxError("source is not a def or class")
    for node in ast.walk(first):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            _drop_docstring(node)
    first.decorator_list = []  # @metric(...)'s arguments are hashed as their own components
    return ast.unparse(first)


def _drop_docstring(node: Any) -> None:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        node.body = body[1:] or ([] if isinstance(node, ast.Module) else [ast.Pass()])


def _code_objects(obj: Any) -> list[types.CodeType]:
    if isinstance(obj, type):
        return [f.__code__ for _, f in sorted(vars(obj).items()) if isinstance(f, types.FunctionType)]
    code = getattr(obj, "__code__", None)
    return [code] if isinstance(code, types.CodeType) else []


def _update_code(h: "hashlib._Hash", code: types.CodeType) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _update_code(h, const)
        else:
            h.update(repr(const).encode())
