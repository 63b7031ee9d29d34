"""An open-unlearning metric config (Hydra YAML, as written) read into one evaldag node.

What is read, in open-unlearning's words (``configs/eval/tofu_metrics/forget_quality.yaml``)::

    # @package eval.tofu.metrics.forget_quality      <- the benchmark and the metric's NAME
    defaults:
      - .@pre_compute.forget_truth_ratio: forget_Truth_Ratio   <- a parent, by its metric name
      - ../../data/datasets@datasets: TOFU_QA_forget          <- the rows a model-calling handler reads
      - ../../generation@generation_args: default
    pre_compute:
      forget_truth_ratio: {access_key: forget}       <- kwargs["pre_compute"]["forget"]
    reference_logs:
      retain_model_logs:
        path: ${eval.tofu.retain_logs_path}          <- --retain-logs (skipped when not given, as there)
        include: {forget_truth_ratio: {access_key: retain}}
    handler: ks_test                                 <- a registered @unlearning_metric
    <anything else>: the handler's keyword arguments

Why not Hydra itself: only this one file's shape is needed, and the parents are evaldag's
own TOFU/MUSE nodes (or earlier ``--add-metric`` configs) by their open-unlearning names,
so their own configs are never composed. ``${eval.<bench>.<field>}`` is resolved from the
run (``retain_logs_path``, ``forget_split``, ``batch_size`` ...); anything else is refused
in one line naming the file and the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ...engine import Node, Value
from .open_unlearning_compat import find_handler, handler_node

PACKAGE = re.compile(r"^#\s*@package\s+eval\.([A-Za-z0-9_]+)\.metrics\.([A-Za-z_][A-Za-z0-9_.\-]*)\s*$")
INTERPOLATION = re.compile(r"\$\{([^}]*)\}")

#: open-unlearning's ``configs/generation/default.yaml``
DEFAULT_GENERATION = {"do_sample": False, "top_p": None, "temperature": None, "max_new_tokens": 200, "use_cache": True}

#: open-unlearning dataset configs -> the evaldag split resource holding the same rows
DATASETS = {
    **{f"TOFU_QA_forget{s}": "tofu_forget" for s in ("", "_para", "_pert", "_idk")},
    **{f"TOFU_QA_retain{s}": "tofu_retain" for s in ("_eval", "_para", "_pert")},
    "TOFU_QA_ra": "tofu_ra", "TOFU_QA_ra_pert": "tofu_ra", "TOFU_QA_wf": "tofu_wf", "TOFU_QA_wf_pert": "tofu_wf",
    "MUSE_forget_verbmem": "muse_verbmem_forget", "MUSE_forget_knowmem": "muse_knowmem_forget_qa",
    "MUSE_retain_knowmem": "muse_knowmem_retain_qa",
}

_KNOWN_DEFAULTS = ("@datasets", "@collators", "@generation_args")


@dataclass
class MetricConfig:
    """One config file, parsed; nothing resolved against a run yet."""

    path: Path
    bench: str
    name: str
    handler: str
    parents: dict[str, str] = field(default_factory=dict)  # metric name -> access key
    parent_configs: dict[str, str] = field(default_factory=dict)  # metric name -> its config's file name (defaults)
    datasets: list[str] = field(default_factory=list)
    reference_logs: dict[str, tuple[str | None, list[tuple[str, str]]]] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)
    collator_args: dict[str, Any] = field(default_factory=dict)


def _error(path: Path, what: str) -> ValueError:
    return ValueError(f"--add-metric {path}: {what}")


def read_config(path: Path) -> MetricConfig:
    """Parse the file: its ``# @package`` line, defaults, pre_compute, reference_logs, handler, arguments."""
    import yaml

    text = path.read_text(encoding="utf-8")
    package = next((m for m in map(PACKAGE.match, text.splitlines()[:5]) if m), None)
    if package is None:
        raise _error(path, "no `# @package eval.<bench>.metrics.<NAME>` line at its top (open-unlearning's first line "
                           "names the benchmark and the metric)")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise _error(path, f"not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise _error(path, "expected a mapping of keys (defaults, pre_compute, handler, ...)")
    doc = dict(doc)
    for key, kind in (("defaults", list), ("pre_compute", dict), ("reference_logs", dict), ("collators", dict),
                      ("generation_args", dict)):
        if doc.get(key) is not None and not isinstance(doc[key], kind):
            raise _error(path, f"{key}: expected a {'list' if kind is list else 'mapping'}, not {type(doc[key]).__name__}")
    handler = doc.pop("handler", None)
    if not isinstance(handler, str) or not handler:
        raise _error(path, "no `handler:` (the registered name of the @unlearning_metric function)")
    cfg = MetricConfig(path, package.group(1), package.group(2), handler)
    for entry in doc.pop("defaults", None) or []:
        _read_default(cfg, entry)
    pre = doc.pop("pre_compute", None) or {}
    if not isinstance(pre, dict):
        raise _error(path, "pre_compute: expected a mapping of metric name -> {access_key: ...}")
    for parent, spec in pre.items():
        spec = spec or {}
        extra = sorted(set(spec) - {"access_key"}) if isinstance(spec, dict) else ["(not a mapping)"]
        if extra:
            raise _error(path, f"pre_compute.{parent}: only access_key is read here (the parent is the benchmark's own "
                               f"{parent}, configured by its flags), not {', '.join(map(str, extra))}")
        cfg.parents[str(parent)] = str(spec.get("access_key", parent))
    for parent in cfg.parent_configs:
        cfg.parents.setdefault(parent, parent)  # open-unlearning: access_key defaults to the name
    for log_name, spec in (doc.pop("reference_logs", None) or {}).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("include") or {}, dict):
            raise _error(path, f"reference_logs.{log_name}: expected {{path: ..., include: {{key: {{access_key: ...}}}}}}")
        pairs = [(str(k), str((v or {}).get("access_key", k))) for k, v in (spec.get("include") or {}).items()]
        cfg.reference_logs[str(log_name)] = (spec.get("path"), pairs)
    for coll_name, coll in (doc.pop("collators", None) or {}).items():  # {DataCollatorForSupervisedDataset: {args: {...}}}
        args = (coll or {}).get("args") if isinstance(coll, dict) else None
        if not isinstance(args or {}, dict):
            raise _error(path, f"collators.{coll_name}.args: expected a mapping")
        cfg.collator_args.update({k: v for k, v in (args or {}).items() if k in ("padding_side", "index")})
    doc.pop("datasets", None)  # open-unlearning's dataset-class arguments: the split's rows are read instead
    generation = doc.pop("generation_args", None)
    if generation is not None:  # the file's own keys over the defaults' generation config
        cfg.arguments["generation_args"] = {**(cfg.arguments.get("generation_args") or {}), **generation}
    cfg.arguments.update(doc)
    return cfg


def _read_default(cfg: MetricConfig, entry: Any) -> None:
    if entry == "_self_":
        return
    if not (isinstance(entry, dict) and len(entry) == 1):
        raise _error(cfg.path, f"defaults: cannot read entry {entry!r} (expected `- KEY: VALUE`)")
    (key, value), = entry.items()
    if str(key).startswith(".@pre_compute."):
        cfg.parent_configs[str(key)[len(".@pre_compute."):]] = str(value)
    elif str(key).endswith("@datasets"):
        cfg.datasets.append(str(value))
    elif str(key).endswith("@generation_args"):
        cfg.arguments["generation_args"] = dict(DEFAULT_GENERATION) if value == "default" else {}
    elif not str(key).endswith(_KNOWN_DEFAULTS):
        raise _error(cfg.path, f"defaults: cannot read entry {key!r} (read here: .@pre_compute.NAME, "
                               "@datasets, @collators, @generation_args)")


def interpolate(x: Any, values: Mapping[str, Any], path: Path, where: str) -> Any:
    """``${eval.<bench>.<field>}`` replaced from ``values``, inside strings of any depth."""
    if isinstance(x, dict):
        return {k: interpolate(v, values, path, f"{where}.{k}") for k, v in x.items()}
    if isinstance(x, list):
        return [interpolate(v, values, path, f"{where}[{i}]") for i, v in enumerate(x)]
    if not isinstance(x, str) or "${" not in x:
        return x
    for ref in INTERPOLATION.findall(x):
        if ref not in values:
            known = ", ".join("${" + k + "}" for k in sorted(values))
            raise _error(path, f"{where}: cannot resolve ${{{ref}}} (known here: {known})")
    whole = INTERPOLATION.fullmatch(x)
    if whole:  # a value on its own keeps its type (batch_size: ${eval.tofu.batch_size} is an int)
        return values[whole.group(1)]
    return INTERPOLATION.sub(lambda m: str(values[m.group(1)]), x)


@dataclass
class RunSide:
    """What the benchmark hands over: names, the run's resources, how to build a parent."""

    group: str
    builtin_names: frozenset[str]
    parent: Callable[[str], Node]  # a built-in metric by its open-unlearning name
    values: dict[str, Any]  # eval.<bench>.<field> -> value (retain_logs_path: the resource name, or None)
    retain_logs_resource: str | None
    resources: Mapping[str, Any]
    added: dict[str, Node] = field(default_factory=dict)  # NAME -> node of configs added before this one


def config_node(cfg: MetricConfig, run: RunSide) -> tuple[Node, dict[str, Any]]:
    """The config as a named node of the benchmark's group, and the resources it adds (literal log paths)."""
    path, name = cfg.path, cfg.name
    if name in run.builtin_names:
        raise _error(path, f"{name!r} is a built-in {run.group} metric; a config of that name would replace its "
                           "results: rename the metric in the `# @package` line")
    if name in run.added:
        raise _error(path, f"{name!r} is already added by another --add-metric config")
    handler = find_handler(cfg.handler)
    if handler is None:
        raise _error(path, f"no open-unlearning handler {cfg.handler!r} is registered: give the file that defines it "
                           "first (--add-metric ./handlers.py), or install the package that registers it")
    parents = {access: _parent(cfg, metric_name, run) for metric_name, access in cfg.parents.items()}
    retain_ref = "${eval." + cfg.bench + ".retain_logs_path}"
    refs, extra = {}, {}
    for log_name, (log_path, pairs) in cfg.reference_logs.items():
        if log_path == retain_ref or log_path is None:
            refs[log_name] = (run.retain_logs_resource if log_path else None, pairs)
            continue
        file = Path(str(interpolate(log_path, run.values, path, f"reference_logs.{log_name}.path")))
        if not file.is_file():
            raise _error(path, f"reference_logs.{log_name}.path: no such file: {file}")
        try:
            logs = json.loads(file.read_text(encoding="utf-8"))  # open-unlearning's files may hold NaN literals
        except (OSError, ValueError) as e:
            raise _error(path, f"reference_logs.{log_name}.path: {file} is not JSON: {e}") from None
        res = f"ou_logs_{name}_{log_name}"
        extra[res] = Value(logs, kind="data", source=str(file))
        refs[log_name] = (res, pairs)
    if len(cfg.datasets) > 1:
        raise _error(path, f"defaults: {len(cfg.datasets)} datasets; one dataset per handler is read here")
    data = None
    if cfg.datasets:
        data = DATASETS.get(cfg.datasets[0])
        if data is None or data not in run.resources:
            raise _error(path, f"dataset {cfg.datasets[0]!r}: this run has no such split (read here: "
                               f"{', '.join(k for k, v in DATASETS.items() if v in run.resources)}; open-unlearning's "
                               "own dataset classes are not rebuilt)")
    values = {**run.values, f"eval.{cfg.bench}.retain_logs_path": None}
    arguments = interpolate(cfg.arguments, values, path, "")
    if cfg.collator_args:
        arguments["collator_args"] = cfg.collator_args
    node = handler_node(name, run.group, handler, arguments, parents, refs, data=data)
    run.added[name] = node
    return node, extra


def _parent(cfg: MetricConfig, metric_name: str, run: RunSide) -> Node:
    """A pre_compute parent: a built-in metric by its name (or its config's), or an earlier config."""
    for candidate in (metric_name, cfg.parent_configs.get(metric_name)):
        if candidate in run.builtin_names:
            return run.parent(candidate)
        if candidate in run.added:
            return run.added[candidate]
    known = sorted(run.builtin_names | set(run.added))
    raise _error(cfg.path, f"pre_compute.{metric_name}: no {run.group} metric of that name (known: {', '.join(known)})")
