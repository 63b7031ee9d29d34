"""A retain model's evaluation logs (``TOFU_EVAL.json`` / ``MUSE_EVAL.json``), checked on reading.

Forget quality and privleak can take the retain side from open-unlearning's
``retain_logs_path`` file (or an evaldag ``<GROUP>_EVAL.json``) instead of running the
retain model. The ``from_logs`` metric hands each entry on as it is, so a wrong shape
would surface deep inside a metric: a ``value_by_index`` that is a list ended in an
``AttributeError``, an AUC of ``Infinity`` made privleak NaN without a reason and an AUC
of 7.5 a plausible-looking number. Here every key a run will read is checked when the
file is read, before any model loads, and a bad one is one line naming file and key:

* ``forget_truth_ratio`` (forget quality): ``value_by_index`` an object of row index ->
  ``{"score": ...}``, at least one row, each score a truth ratio: a finite number >= 0
  (``p_wrong / (p_correct + 1e-10)``: 0 only when ``p_wrong`` underflows), or NaN / null,
  which open-unlearning writes for an item with no scored tokens and the KS test
  carries on as there.
* ``mia_min_k`` (privleak): ``agg_value`` an AUC, a finite number in [0, 1]. NaN is
  refused as before: open-unlearning's AUC is scikit-learn's ``roc_auc_score``, which
  refuses NaN scores, so a NaN AUC is no real log.

``json`` reads ``NaN`` / ``Infinity`` literals, which open-unlearning's files contain.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..textfile import DataError, read_utf8

#: the retain-side metric each reading metric binds to (``Catalogue.retain_side``)
READS = {"forget_quality": "forget_truth_ratio", "privleak": "mia_min_k"}


@dataclass(frozen=True)
class EvalLogs:
    """A retain model's evaluation logs, as forget quality and privleak read them."""

    path: str
    forget_truth_ratio: dict[str, float | None] | None  # row -> truth ratio
    mia_min_k_auc: float | None
    raw: dict = field(repr=False, default_factory=dict)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _entry(raw: Mapping[str, Any], key: str, sub: str, path: str, why: str) -> Any:
    """``raw[key][sub]``; a missing one (or null) says which metric needs it."""
    node = raw.get(key)
    if node is not None and not isinstance(node, Mapping):
        raise DataError(f"{path}: {key} is a {_kind(node)}, expected an object with {sub!r}")
    if node is None or node.get(sub) is None:
        raise DataError(
            f"{path}: retain logs lack '{key}.{sub}' (needed for {why}); evaluate the retain "
            "model with that metric first, or download open-unlearning's eval logs"
        )
    return node[sub]


def _kind(x: Any) -> str:
    return {list: "list", dict: "object", str: "string", bool: "boolean"}.get(type(x), type(x).__name__)


def truth_ratios(raw: Mapping[str, Any], path: str) -> dict[str, float | None]:
    """``forget_truth_ratio.value_by_index`` as row -> score (None for null), checked."""
    where = "forget_truth_ratio.value_by_index"
    vbi = _entry(raw, "forget_truth_ratio", "value_by_index", path, "forget_quality")
    if not isinstance(vbi, Mapping):
        raise DataError(f"{path}: {where} is a {_kind(vbi)}, expected an object of index -> {{score}}")
    if not vbi:
        raise DataError(f"{path}: {where} is empty, expected an object of index -> {{score}} with at least one row")
    out: dict[str, float | None] = {}
    for key, item in vbi.items():
        if not str(key).isdigit():
            raise DataError(f"{path}: {where} key {key!r} is not a row index (0, 1, ...)")
        if not isinstance(item, Mapping) or "score" not in item:
            got = f"an object without 'score' (keys {sorted(item)[:5]})" if isinstance(item, Mapping) else f"a {_kind(item)}"
            raise DataError(f"{path}: {where}[{key!r}] is {got}, expected {{score}}")
        score = item["score"]
        if score is not None and not (_is_number(score) and (math.isnan(score) or (math.isfinite(score) and score >= 0))):
            raise DataError(f"{path}: {where}[{key!r}].score is {score!r}, expected a truth ratio: "
                            "a finite number >= 0 (or NaN / null for an item with no scored tokens)")
        out[str(key)] = None if score is None else float(score)
    return out


def min_k_auc(raw: Mapping[str, Any], path: str) -> float:
    """``mia_min_k.agg_value``, checked to be an AUC."""
    value = _entry(raw, "mia_min_k", "agg_value", path, "privleak")
    if not _is_number(value) or not (0.0 <= value <= 1.0):  # NaN and infinities fail the range too
        raise DataError(f"{path}: mia_min_k.agg_value is {value!r}, expected an AUC: a number in [0, 1]")
    return float(value)


def read_eval_logs(path: str | Path, *, need_truth_ratio: bool, need_min_k: bool) -> EvalLogs:
    """Shared by TOFU and MUSE: read an ``<BENCH>_EVAL.json`` and check the needed keys."""
    path = Path(path)
    try:
        raw = json.loads(read_utf8(path))
    except FileNotFoundError:
        raise DataError(f"{path}: retain logs not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: retain logs must be a JSON file, got a folder") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object of metric results, got a {_kind(raw)}")
    tr = truth_ratios(raw, str(path)) if need_truth_ratio else None
    auc = min_k_auc(raw, str(path)) if need_min_k else None
    return EvalLogs(str(path), tr, auc, raw)


def needs(metrics: Iterable[str] | None) -> dict[str, bool]:
    """Which keys a run asking for ``metrics`` reads (None: every one)."""
    asked = set(READS) if metrics is None else set(metrics)
    return {"need_truth_ratio": "forget_quality" in asked, "need_min_k": "privleak" in asked}


def load_eval_logs(path: str | Path, metrics: Iterable[str] | None = None) -> EvalLogs:
    """A retain model's ``TOFU_EVAL.json``: ``forget_truth_ratio.value_by_index`` for forget
    quality and ``mia_min_k.agg_value`` for privleak (of those ``metrics`` asks for)."""
    return read_eval_logs(path, **needs(metrics))
