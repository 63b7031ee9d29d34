"""The retain model's per-item values a ``--retain-model`` run computed, written beside its
files in open-unlearning's retain-logs shape: ``<GROUP>_RETAIN_LOGS.json``.

Why: forget quality and privleak compare the model's items with the retain model's (its forget
truth ratios, its Min-K% scores). A ``--retain-logs`` run names the file those items came from;
a ``--retain-model`` run computed them in the graph and kept them only in the cache, so
``evaldag compare`` and the report's paired tests could not test either metric item by item.
The file holds each retain-side value under its own side's name (``forget_truth_ratio``,
``mia_min_k``), whole Results as ``<GROUP>_EVAL.json`` holds them (``value_by_index``), so it
is also a ``--retain-logs`` file for a later run; run.json names it under
``retain_logs_written`` (``{GROUP: file name}``), where ``paired_report.retain_logs_of`` finds it.
The name does not end in ``_EVAL.json``: readers that take every EVAL file for a benchmark's
own numbers do not show the retain model's as the run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...engine import Result
from ...engine.outputs import add_file, add_to_run_json

SUFFIX = "_RETAIN_LOGS.json"
KEY = "retain_logs_written"  # run.json's key: {GROUP: the file's name beside run.json}


def retain_values(result: Any, group: str) -> dict[str, Result]:
    """``{name of the forget side: the retain model's Result}`` for every node of ``group`` with a
    ``forget`` and a ``retain`` parent computed on ``retain_model`` (forget quality, privleak
    and their intervals); retain sides read from logs are left out (the run names those logs)."""
    g = result.graph
    out: dict[str, Result] = {}
    for v in g.order():
        keys = v.parent_keys
        if group not in (n[0] for n in v.names) or "forget" not in keys or "retain" not in keys:
            continue
        side = g.vertices[keys["retain"]]
        name = next((n for grp, n in g.vertices[keys["forget"]].names if grp == group), None)
        rec = result.records.get(side.key)
        if side.bind.get("model") != "retain_model" or name is None or name in out or not rec \
                or rec.status not in ("computed", "cached"):
            continue
        try:
            value = result.value(side.key)
        except KeyError:  # not stored (a run without a cache kept no value)
            continue
        if isinstance(value, Result):
            out[name] = value
    return out


def write_retain_logs(result: Any, folder: Path, group: str) -> list[Path]:
    """``<GROUP>_RETAIN_LOGS.json`` and its name in run.json, when the run computed a retain side."""
    values = retain_values(result, group)
    if not values:
        return []
    name = group + SUFFIX
    path = add_file(folder, name, values)
    add_to_run_json(folder, KEY, group, name)
    return [path]
