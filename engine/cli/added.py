"""``--add-metric``: a registered metric, or one from a local file, run on a benchmark's resources.

What the argument is (issue 30 will extend the rule): an argument naming an existing
file is a file -- ``./my_metrics.py`` adds every metric the file declares,
``./my_metrics.py:NAME`` one of them; the file is imported from its path, so a metric can
be tried without packaging it. Anything else is a registered metric name (``evaldag list``).

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
from typing import Any, Mapping

from ..menu import did_you_mean
from ..declare import REGISTRY, DeclarationError, MetricDef, Node
from ..graph import Graph, GraphError

DEFAULT_SPLIT = "forget"


def load_file(path: Path) -> list[MetricDef]:
    """Import a Python file by path (its ``@metric`` declarations register) -> what it declared."""
    name = "evaldag_user_metrics_" + "".join(c if c.isalnum() else "_" for c in str(path.resolve()))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"--add-metric {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # the user's code: one line naming the file, not a traceback
            del sys.modules[name]
            raise ValueError(f"--add-metric {path}: importing it failed: {type(e).__name__}: {e}") from None
    return [m for m in REGISTRY.all() if m.fn.__module__ == name]


def metrics_of(arg: str) -> list[tuple[MetricDef, str | None]]:
    """``NAME[@SPLIT]`` or ``FILE.py[:NAME][@SPLIT]`` -> the metric definitions and the split asked for."""
    text, split = (arg, "") if Path(arg).is_file() else arg.partition("@")[::2]
    where, wanted = (text, "")
    if ":" in text and not Path(text).is_file():
        where, wanted = text.rsplit(":", 1)
    if Path(where).is_file():
        found = load_file(Path(where))
        if wanted:
            found = [m for m in found if m.name == wanted]
            if not found:
                raise ValueError(f"--add-metric {arg}: {where} declares no metric {wanted!r}")
        elif not found:
            raise ValueError(f"--add-metric {arg}: {where} declares no @metric")
        return [(m, split or None) for m in found]
    m = REGISTRY.get(text)
    if m is None:
        raise ValueError(f"--add-metric {text}: no registered metric of that name; "
                         f"{did_you_mean(text, [d.name for d in REGISTRY.all()])}(see `evaldag list`, "
                         "or give a file: ./my_metrics.py[:NAME])")
    return [(m, split or None)]


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
    return m(name=m.name + (f"@{split}" if split else ""), bind=bind)


def added_metrics(args: list[str], resources: Mapping[str, Any]) -> list[Node]:
    """Every ``--add-metric`` as a named node (ungrouped: its results land in RUN_EVAL.json, under
    its name, ``NAME@SPLIT`` when a split was named)."""
    return [added_node(m, split, resources) for arg in args for m, split in metrics_of(arg)]
