"""``--add-metric``: a registered metric, or one from a local file, run on a benchmark's resources.

The one dispatch rule: an argument that names an existing file is a file, anything else is
a registered metric name (``evaldag list``) -- ``NAME[@SPLIT]``. A file is ``./my.py``
(every ``@metric`` it declares), ``./my.py:NAME`` (one of them), each ``[@SPLIT]``, imported
from its path so a metric can be tried without packaging it; or ``./my.yaml`` / ``.yml``,
a benchmark's own metric config (an open-unlearning config for TOFU/MUSE), which the
benchmark its first line names reads (the ``added_config`` hook of that benchmark: the
engine knows nothing of the format). ``.py`` files are imported before any config is read,
so a config finds the handlers a file registers, whatever the order of the flags.

Where results land: names and ``.py`` metrics in ``RUN_EVAL.json`` (ungrouped, under their
name, ``NAME@SPLIT`` when a split was named) unless the metric declares a ``default_group``
(an lm-debugger ``MetricItem``: ``EDITING_EVAL.json``); a config in its benchmark's
``<BENCH>_EVAL.json`` under the config's own name.

How it is bound: a metric reads resources by their generic names (``model``, ``data``);
a benchmark provides ``model`` and its data splits under its own names (TOFU's
``tofu_forget``). A need the run provides under its own name is read as is; ``data`` is
bound to the split named by ``NAME@SPLIT`` (``exact_memorization@holdout``), the forget
split by default -- the resource named ``SPLIT`` or ``<bench>_SPLIT``. A need the run
cannot provide is refused before anything runs, naming the metric and what is missing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..menu import did_you_mean
from ..declare import REGISTRY, DeclarationError, MetricDef, Node
from ..fingerprint import identify_by_file
from ..graph import Graph, GraphError

DEFAULT_SPLIT = "forget"


def load_file(path: Path) -> list[MetricDef]:
    """Import a Python file by path (its ``@metric`` declarations register) -> what it declared.

    The whole file's code is part of the code identity of every metric and handler it
    declares (``identify_by_file``): an edited helper of the same file recomputes them."""
    name = "evaldag_user_metrics_" + "".join(c if c.isalnum() else "_" for c in str(path.resolve()))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"--add-metric {path}: not a Python file")
        identify_by_file(name, _source(path))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as e:  # the user's code: one line naming the file, not a traceback
            del sys.modules[name]
            if not isinstance(e, (Exception, SystemExit)):  # Ctrl-C stays an interrupt
                raise
            raise ValueError(f"--add-metric {path}: {_import_failure(e)}") from None
    return [m for m in REGISTRY.all() if m.fn.__module__ == name]


def _source(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        raise ValueError(f"--add-metric {path}: cannot read it: {e.strerror or e}") from None


def _import_failure(e: BaseException) -> str:
    """What went wrong importing a metric file, in words: a script's ``sys.exit`` is not a crash."""
    if isinstance(e, SystemExit):
        return (f"importing it called sys.exit({'' if e.code is None else repr(e.code)}); a metric file must not exit "
                "(put a script's own work under `if __name__ == \"__main__\":`)")
    return f"importing it failed: {type(e).__name__}: {e}"


CONFIG_SUFFIXES = (".yaml", ".yml")


def classify(arg: str) -> tuple[str, str, str, str]:
    """The dispatch rule -> (form, what, NAME, SPLIT): form ``py`` / ``config`` (an existing file)
    or ``name`` (anything else), refused in one line where the file form is malformed."""
    if Path(arg).is_file():
        text, split, wanted = arg, "", ""
    else:
        text, _, split = arg.partition("@")
        wanted = ""
        if not Path(text).is_file() and ":" in text and Path(text.rsplit(":", 1)[0]).is_file():
            text, wanted = text.rsplit(":", 1)
    if not Path(text).is_file():
        if text.endswith((".py", *CONFIG_SUFFIXES)) or "/" in text or "\\" in text:
            raise ValueError(f"--add-metric {arg}: no such file: {text} (an argument naming an existing file is a "
                             "file; anything else must be a registered metric name)")
        return "name", text, "", split
    suffix = Path(text).suffix.lower()
    if suffix in CONFIG_SUFFIXES:
        if wanted or split:
            raise ValueError(f"--add-metric {arg}: a config file takes no :NAME or @SPLIT (its first line names the metric)")
        return "config", text, "", ""
    if suffix != ".py":
        raise ValueError(f"--add-metric {arg}: {text} is neither a Python file (.py) nor a config (.yaml, .yml)")
    return "py", text, wanted, split


def metrics_of(arg: str, configs_follow: bool = False) -> list[tuple[MetricDef, str | None]]:
    """``NAME[@SPLIT]`` or ``FILE.py[:NAME][@SPLIT]`` -> the metric definitions and the split asked for.

    ``configs_follow``: a config is among the arguments, so a file may declare only the
    handlers it reads (no ``@metric``)."""
    form, where, wanted, split = classify(arg)
    if form == "py":
        found = load_file(Path(where))
        if wanted:
            found = [m for m in found if m.name == wanted]
            if not found:
                raise ValueError(f"--add-metric {arg}: {where} declares no metric {wanted!r}")
        elif not found and not configs_follow:
            raise ValueError(f"--add-metric {arg}: {where} declares no @metric")
        return [(m, split or None) for m in found]
    m = REGISTRY.get(where)
    if m is None:
        raise ValueError(f"--add-metric {where}: no registered metric of that name; "
                         f"{did_you_mean(where, [d.name for d in REGISTRY.all()])}(see `evaldag list`, "
                         "or give a file: ./my_metrics.py[:NAME] or ./my_metric.yaml)")
    return [(m, split or None)]


def config_nodes(path: Path, benches: Sequence[tuple[Any, Any]], resources: dict[str, Any],
                 added: dict[str, Node]) -> Node:
    """A config file read by the benchmark of this run that claims it; its resources join the run's."""
    for bench, cfg in benches:
        hook = getattr(bench, "added_config", None)
        got = hook(path, cfg, resources, added) if hook is not None else None
        if got is not None:
            node, extra = got
            resources.update(extra)
            return node
    names = ", ".join(b.name for b, _ in benches) or "none"
    raise ValueError(f"--add-metric {path}: no benchmark of this run ({names}) reads this config; its first line "
                     "names its benchmark (`# @package eval.<bench>.metrics.<NAME>`, open-unlearning's tofu or muse)")


def split_resource(split: str, resources: Mapping[str, Any]) -> str | None:
    """The resource holding ``split``: named so, or ``<bench>_<split>`` (one benchmark's)."""
    if split in resources:
        return split
    found = sorted(r for r in resources if r.endswith("_" + split) and "_" not in r[: -len(split) - 1])
    return found[0] if found else None


def added_node(m: MetricDef, split: str | None, resources: Mapping[str, Any]) -> Node:
    """The metric as a node of this run, its needs bound to the run's resources, or a ValueError."""
    try:
        needs = Graph([m(name=m.name)]).required_resources()
    except (DeclarationError, GraphError) as e:  # e.g. a parameter without a default
        raise ValueError(f"--add-metric {m.name}: {e}") from None
    pending = [n for n in needs if n not in resources and n in REGISTRY.providers]
    while pending:  # a provider the run derives (weight_deltas): what it reads is what the run must provide
        name = pending.pop()
        needs.pop(name, None)
        for k in REGISTRY.providers[name].needs:
            if k not in needs and k not in resources and k in REGISTRY.providers:
                pending.append(k)
            needs.setdefault(k, [])
    bind: dict[str, str] = {}
    missing = []
    for need in sorted(needs):
        if need in resources and not (need == "data" and split):
            continue
        if need == "data":
            found = split_resource(split or DEFAULT_SPLIT, resources)
            if found:
                bind["data"] = found
                continue
            missing.append(f"data (split {split or DEFAULT_SPLIT!r}: none of {', '.join(sorted(resources))}; "
                           f"name one with {m.name}@SPLIT)")
        else:
            missing.append(need)
    if missing:
        raise ValueError(f"--add-metric {m.name}: this run does not provide {'; '.join(missing)}")
    # a metric may name the group its results belong to (a MetricItem: EDITING, so EDITING_EVAL.json)
    return m(name=m.name + (f"@{split}" if split else ""), bind=bind, group=getattr(m, "default_group", None))


def added_metrics(args: list[str], resources: dict[str, Any], benches: Sequence[tuple[Any, Any]] = ()) -> list[Node]:
    """Every ``--add-metric`` as a named node: names and ``.py`` metrics ungrouped (``RUN_EVAL.json``),
    configs in their benchmark's group. ``benches``: the run's (benchmark, config) pairs;
    resources a config adds (a reference-logs file) are added to ``resources``."""
    forms = [(arg, classify(arg)) for arg in args]
    has_config = any(form == "config" for _, (form, *_) in forms)
    nodes = [added_node(m, split, resources) for arg, (form, *_) in forms if form != "config"
             for m, split in metrics_of(arg, has_config)]
    added: dict[str, Node] = {}
    return nodes + [config_nodes(Path(where), benches, resources, added)
                    for _, (form, where, *_) in forms if form == "config"]
