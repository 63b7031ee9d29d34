"""The files an lm-evaluation-harness task reads, so that editing any of them recomputes it.

lm-evaluation-harness reads a task's YAML file, every YAML it ``include:``s (a relative
path from the including file's folder, recursively), the module each ``!function
mod.fn`` names (``mod.py`` beside the YAML file that holds the tag, in whatever folder
an include brought it from), and the data files ``datasets`` resolves: each file a
``data_files`` pattern matches (relative to ``data_dir``, else the current folder), and a
local ``dataset_path`` or ``data_dir`` folder's files. A cached value is only as fresh as
what its digest covers, so :func:`digest` hashes these files' contents -- never a pattern
or a folder's name in their place.

The same reader names a task file whose YAML does not parse (:func:`unreadable`):
lm-evaluation-harness's index skips such a file without a word, and the task in it would
otherwise be reported as unknown.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

#: folders lm-evaluation-harness's index does not walk
IGNORED_DIRS = {"__pycache__", ".ipynb_checkpoints"}


class Unreadable(ValueError):
    """A task YAML file that cannot be read as lm-evaluation-harness reads it; the message names it."""


def _loader(functions: list[str]) -> type:
    base = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader

    class Loader(base):  # type: ignore[misc, valid-type]
        """lm-evaluation-harness's loader: safe YAML plus ``!function``, recorded rather than imported."""

    def function(loader: Any, node: Any) -> str:
        spec = loader.construct_scalar(node)
        functions.append(spec)
        return spec

    Loader.add_constructor("!function", function)
    return Loader


def _where(path: Path, e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    line = f", line {mark.line + 1}" if mark is not None else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    cmark = getattr(e, "context_mark", None)
    if context and cmark is not None and mark is not None and cmark.line != mark.line:
        context = f"{context} at line {cmark.line + 1}"
    return f"{path}{line}: {problem}" + (f" ({context})" if context else "")


def function_module(spec: str, folder: Path) -> Path | None:
    """The file ``!function mod.fn`` loads from the YAML file in ``folder``; None for an
    importable module (lm-evaluation-harness falls back to ``import mod``)."""
    mod = spec.rpartition(".")[0]
    path = (folder / f"{mod.replace('.', '/')}.py").resolve() if mod else None
    return path if path is not None and path.is_file() else None


def yaml_reads(path: Path, seen: set[Path] | None = None) -> set[Path]:
    """``path``, every YAML it includes and every ``!function`` module they name; Unreadable otherwise."""
    path = Path(path).expanduser().resolve()
    seen = set() if seen is None else seen
    if path in seen:
        raise Unreadable(f"{path}: include cycle")
    seen.add(path)
    functions: list[str] = []
    try:
        with path.open("rb") as f:
            cfg = yaml.load(f, Loader=_loader(functions))  # noqa: S506 - a safe loader with one tag added
    except yaml.YAMLError as e:
        raise Unreadable(_where(path, e)) from None
    except OSError as e:
        raise Unreadable(f"{path}: {e.strerror or e}") from None
    if not isinstance(cfg, dict):
        raise Unreadable(f"{path}: not a YAML mapping ({type(cfg).__name__})")
    out = {path} | {m for m in (function_module(s, path.parent) for s in functions) if m is not None}
    includes = cfg.get("include") or []
    for inc in includes if isinstance(includes, list) else [includes]:
        target = Path(str(inc))
        out |= yaml_reads(target if target.is_absolute() else path.parent / target, seen)
    return out


def unreadable(include_path: str, name: str) -> str | None:
    """The first task file under ``include_path`` that mentions ``name`` and cannot be read, as
    ``FILE, line N: problem``; None when every such file reads."""
    word = re.compile(rf"(?<![\w\-.]){re.escape(name)}(?![\w\-.])")
    for path in sorted(Path(include_path).glob("**/*.yaml"), key=lambda p: p.as_posix()):
        if any(part in IGNORED_DIRS for part in path.parts):
            continue
        try:
            if not word.search(path.read_text(encoding="utf-8", errors="replace")):
                continue
            yaml_reads(path)
        except Unreadable as e:
            return str(e)
        except OSError:
            continue
    return None


def _under(folder: Path) -> set[Path]:
    """Every file below ``folder`` (hidden ones aside, as ``datasets`` leaves them)."""
    return {p.resolve() for p in folder.rglob("*") if p.is_file()
            and not any(part.startswith(".") or part in IGNORED_DIRS for part in p.relative_to(folder).parts)}


def patterns(data_files: Any) -> list[str]:
    if isinstance(data_files, str):
        return [data_files]
    if isinstance(data_files, dict):
        return [f for v in data_files.values() for f in patterns(v)]
    if isinstance(data_files, (list, tuple)):
        return [f for v in data_files for f in patterns(v)]
    return []


def data_reads(cfg: dict, local_builders: Iterable[str]) -> tuple[set[Path], list[str]]:
    """The local files ``datasets`` reads for this task config, and the patterns that match none.

    A hub dataset (``dataset_path`` neither a local builder nor a local path) reads nothing
    locally; its name and revision are in the config."""
    from datasets.data_files import resolve_pattern  # installed with lm-evaluation-harness

    path = cfg.get("dataset_path")
    if not isinstance(path, str) or not path:
        return set(), []
    kwargs = cfg.get("dataset_kwargs") or {}
    data_dir = kwargs.get("data_dir")
    if path in local_builders:
        base = Path(str(data_dir or "")).expanduser().resolve()
    elif Path(path).expanduser().exists():
        base = Path(path, str(data_dir or "")).expanduser().resolve()
    else:
        return set(), []
    files: set[Path] = set()
    if path not in local_builders:
        root = Path(path).expanduser().resolve()
        files |= _under(root) if root.is_dir() else {root}
    local = [p for p in patterns(kwargs.get("data_files")) if "://" not in p]
    if not local and data_dir and base.is_dir():
        files |= _under(base)
    missing = []
    for pattern in local:
        try:
            files |= {Path(f).resolve() for f in resolve_pattern(pattern, base_path=base.as_posix())}
        except FileNotFoundError:
            missing.append(pattern)
    return files, missing


def digest(leaves: dict[str, dict], files: Iterable[str | Path]) -> str:
    """sha256 of the leaf tasks' configs and of each file's path and contents."""
    h = hashlib.sha256()
    for name in sorted(leaves):
        h.update(json.dumps(leaves[name], sort_keys=True, default=str).encode())
    for f in sorted({str(f) for f in files}):
        p = Path(f)
        h.update(f.encode() + b"\0" + (_sha256(p) if p.is_file() else b"absent"))
    return h.hexdigest()


def _sha256(path: Path) -> bytes:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.digest()
