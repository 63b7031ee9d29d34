"""Which lm-evaluation-harness tasks a run names, checked before any model loads.

lm-evaluation-harness's own ``TaskManager`` indexes the task YAML files (its own and
``--include-path``'s); this module reads that index -- no dataset is downloaded, no
task object built -- to say, each as one error line: an unknown name (with close
matches), a task whose dataset needs the hub while offline, an output type evaldag
cannot serve. It also plans the EVAL entries (one per task or group and metric, from
the YAML's ``metric_list`` / ``aggregate_metric_list``) and digests what the tasks read
(``inputs.py``: their YAML files and includes, ``!function`` modules, the data files
``datasets`` resolves), so editing a task or its data recomputes it.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import inputs

#: the request types evaldag serves (TemplateLM's three; multiple_choice is loglikelihood)
SERVABLE = ("loglikelihood", "multiple_choice", "loglikelihood_rolling", "generate_until")
#: lm-evaluation-harness's metrics of an output type whose YAML names none (its DEFAULT_METRIC_REGISTRY)
DEFAULT_METRICS = {"loglikelihood": ("perplexity", "acc"), "multiple_choice": ("acc", "acc_norm"),
                   "loglikelihood_rolling": ("word_perplexity", "byte_perplexity", "bits_per_byte"),
                   "generate_until": ("exact_match",)}
#: ``datasets`` builders that read local files (``data_files``), not the hub
LOCAL_BUILDERS = {"json", "csv", "parquet", "text", "arrow", "pandas", "webdataset", "imagefolder", "audiofolder"}
INSTALL = "lm-evaluation-harness is not installed: pip install 'evaldag[lmeval]'"


class TaskError(ValueError):
    """A bad --tasks / --include-path: the message is the whole error line."""


def installed_version() -> str:
    """The installed lm-evaluation-harness version (without importing it), or TaskError."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lm_eval")
    except PackageNotFoundError:
        raise TaskError(INSTALL) from None


@dataclass
class Plan:
    """The tasks of one run: what lm-evaluation-harness loads, and what evaldag reports."""

    names: tuple[str, ...]
    leaves: dict[str, dict] = field(default_factory=dict)  # leaf task -> its YAML config (includes resolved)
    entries: list[tuple[str, str, str]] = field(default_factory=list)  # (task or group, metric, filter)
    digest: str = ""
    files: set[str] = field(default_factory=set)  # what the tasks read (inputs.py): YAML, modules, data


def task_manager(include_path: str | None, names: tuple[str, ...] = ()) -> Any:
    """lm-evaluation-harness's TaskManager: only ``include_path``'s YAML files when every
    name is there (indexing its thousands of built-in tasks takes seconds to a minute),
    else all of them -- after a plain-text scan of the built-in YAML files has shown that
    each missing name occurs there at all (an unknown name fails in a second, not a minute)."""
    try:
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise TaskError(INSTALL) from None
    local = None
    if include_path:
        try:
            local = TaskManager(include_path=include_path, include_defaults=False)
        except TypeError:  # an older TaskManager without include_defaults
            local = None
        if local is not None and all(n in _index(local) for n in names):
            return local
    missing = [n for n in names if local is None or n not in _index(local)]
    for n in missing if include_path else ():  # lm-evaluation-harness skips a file it cannot read, silently
        where = inputs.unreadable(include_path, n)
        if where:
            raise TaskError(f"--include-path: {where} (so task {n!r} is not found)")
    text = _builtin_text() if missing else ""
    for n in missing:
        if not re.search(rf"(?<![\w\-.]){re.escape(n)}(?![\w\-.])", text):
            builtin = re.findall(r"(?m)^(?:task|group|tag):[ \t]*['\"]?([\w\-.]+)", text)
            raise _unknown(n, sorted(set(builtin) | set(_index(local) if local is not None else ())))
    return TaskManager(include_path=include_path) if include_path else TaskManager()


def _builtin_text() -> str:
    """lm-evaluation-harness's own task YAML files, joined: a task, group or tag name is
    written literally in one of them, so a name that occurs nowhere in it is unknown."""
    import importlib.util

    spec = importlib.util.find_spec("lm_eval")
    root = Path(spec.origin).parent / "tasks" if spec and spec.origin else None
    if not root or not root.is_dir():
        return ""
    return "\n".join(p.read_text(encoding="utf-8", errors="ignore") for p in sorted(root.rglob("*.yaml")))


def _index(tm: Any) -> dict[str, Any]:
    return tm.task_index


def _kind(entry: Any) -> str:
    k = getattr(entry, "kind", None)
    if k is not None:
        return k.name.lower()  # TASK, PY_TASK, GROUP, TAG
    return str(entry.get("type", "task")).replace("python_task", "py_task")  # older index: dicts


def _cfg(tm: Any, name: str) -> dict:
    entry = _index(tm)[name]
    cfg = getattr(entry, "cfg", None)
    if cfg is None and hasattr(tm, "_get_config"):
        cfg = tm._get_config(name)
    return dict(cfg or {})


def _members(tm: Any, name: str) -> list[str | dict]:
    """A group's or tag's children (names, or inline task configs)."""
    if _kind(_index(tm)[name]) == "tag":
        return [n for n, e in _index(tm).items() if name in (getattr(e, "tags", None) or ())]
    tasks = _cfg(tm, name).get("task") or []
    return list(tasks) if isinstance(tasks, list) else [tasks]


def unknown(name: str, tm: Any) -> TaskError:
    return _unknown(name, list(_index(tm)))


def _unknown(name: str, known: list[str]) -> TaskError:
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = f" (close matches: {', '.join(close)})" if close else " (no close match; `lm-eval ls tasks` lists them)"
    return TaskError(f"--tasks: unknown lm-evaluation-harness task {name!r}{hint}")


def plan(names: tuple[str, ...], include_path: str | None) -> Plan:
    """Resolve ``names`` to leaf tasks and EVAL entries, checking each leaf; TaskError otherwise."""
    if include_path and not Path(include_path).is_dir():
        raise TaskError(f"--include-path: no such folder: {include_path}")
    tm = task_manager(include_path, names)
    out = Plan(names)
    owner: dict[str, str] = {}  # leaf -> the top-level name that brings it (lm-evaluation-harness allows one)
    for name in dict.fromkeys(names):
        if name not in _index(tm):
            raise unknown(name, tm)
        mine = _leaves_of(tm, name, include_path)
        for leaf in sorted(mine & set(owner)):
            raise TaskError(f"--tasks: task {leaf!r} is named twice ({owner[leaf]!r} and {name!r}); "
                            "lm-evaluation-harness refuses a task in two top-level items")
        owner.update(dict.fromkeys(mine, name))
        _walk(tm, name, out, include_path, top=True)
    out.digest = inputs.digest(out.leaves, out.files)
    return out


def _leaves_of(tm: Any, name: str, include_path: str | None) -> set[str]:
    probe = Plan((name,))
    _walk(tm, name, probe, include_path)
    return set(probe.leaves)


def _walk(tm: Any, item: str | dict, out: Plan, include_path: str | None, top: bool = False) -> None:
    if isinstance(item, dict):  # an inline task config inside a group
        base = _cfg(tm, item["task"]) if item.get("task") in _index(tm) else {}
        cfg = {**base, **item}
        if isinstance(cfg.get("task"), list):
            return _walk_group(tm, cfg, out, include_path, top)
        return _leaf(cfg, out, include_path, top)
    if item not in _index(tm):
        raise unknown(item, tm)
    kind = _kind(_index(tm)[item])
    _reads(_index(tm)[item], out)
    if kind in ("group", "tag"):
        return _walk_group(tm, {"group": item, **(_cfg(tm, item) if kind == "group" else {})}, out, include_path, top,
                           members=_members(tm, item))
    cfg = _cfg(tm, item)
    cfg.setdefault("task", item)
    _leaf(cfg, out, include_path, top, python=kind == "py_task")


def _reads(entry: Any, out: Plan) -> None:
    """An index entry's YAML file, its includes and ``!function`` modules, and the Python files
    beside it (what those modules may import) into ``out.files``."""
    yaml_path = getattr(entry, "yaml_path", None) or (entry.get("yaml_path") if isinstance(entry, dict) else None)
    if not yaml_path or not Path(yaml_path).is_file():
        return
    try:
        out.files.update(str(p) for p in inputs.yaml_reads(Path(yaml_path)))
    except inputs.Unreadable as e:
        raise TaskError(f"--include-path: {e}") from None
    out.files.update(str(p.resolve()) for p in Path(yaml_path).parent.glob("*.py"))


def _walk_group(tm: Any, cfg: dict, out: Plan, include_path: str | None, top: bool, members: list | None = None) -> None:
    name = cfg.get("group")
    aggregate = cfg.get("aggregate_metric_list") or []
    if isinstance(aggregate, dict):
        aggregate = [aggregate]
    for child in members if members is not None else (cfg.get("task") or []):
        _walk(tm, child, out, include_path, top=top and not aggregate)
    if top and aggregate:
        for a in aggregate:
            for flt in a.get("filter_list") or ["none"]:
                out.entries.append((name, a["metric"], flt))


def _leaf(cfg: dict, out: Plan, include_path: str | None, top: bool, python: bool = False) -> None:
    name = str(cfg.get("task"))
    if not python:
        otype = cfg.get("output_type", "generate_until")
        if otype not in SERVABLE:
            raise TaskError(f"--tasks: task {name!r} has output_type {otype!r}; evaldag serves {', '.join(SERVABLE)}")
        for media in ("doc_to_image", "doc_to_audio"):
            if cfg.get(media):
                raise TaskError(f"--tasks: task {name!r} is multimodal ({media}); evaldag serves text requests only")
        _check_dataset(name, cfg, include_path)
        files, missing = inputs.data_reads(cfg, LOCAL_BUILDERS)
        if missing:
            raise TaskError(f"--tasks: task {name!r} reads data_files {missing[0]!r}, which matches no file "
                            "(a relative pattern is read from the current folder, or from data_dir)")
        out.files.update(str(p) for p in files)
    out.leaves[name] = cfg
    if top:
        otype = cfg.get("output_type", "generate_until")
        metrics = [m["metric"] for m in cfg.get("metric_list") or [] if isinstance(m.get("metric"), str)]
        filters = [f["name"] for f in cfg.get("filter_list") or []] or ["none"]
        for metric in metrics or DEFAULT_METRICS.get(otype, ()):
            for flt in filters:
                out.entries.append((name, metric, flt))


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _check_dataset(name: str, cfg: dict, include_path: str | None) -> None:
    path = cfg.get("dataset_path")
    if not isinstance(path, str) or not path:
        return
    kwargs = cfg.get("dataset_kwargs") or {}
    if path in LOCAL_BUILDERS:
        for f in inputs.patterns(kwargs.get("data_files")):
            if "://" not in f and not any(c in f for c in "*?[") and not Path(f).expanduser().exists():
                raise TaskError(f"--tasks: task {name!r} reads data file {f!r}, which does not exist "
                                "(a relative data_files path is read from the current folder)")
        return
    if Path(path).expanduser().exists() or not _offline() or _in_hub_cache(path):
        return
    where = f"--include-path {include_path}" if include_path else "--include-path DIR"
    raise TaskError(f"--tasks: task {name!r} needs dataset {path!r} from the Hugging Face hub, but HF_HUB_OFFLINE is set "
                    f"and no cached copy is here; download it online first, or write a local task (dataset_path: json "
                    f"with data_files) in a folder given as {where}")


def _in_hub_cache(repo: str) -> bool:
    home = Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser()
    hub = Path(os.environ.get("HF_HUB_CACHE", home / "hub")).expanduser()
    ds = Path(os.environ.get("HF_DATASETS_CACHE", home / "datasets")).expanduser()
    return (hub / f"datasets--{repo.replace('/', '--')}").is_dir() or (ds / repo.replace("/", "___")).is_dir()
