"""Node values as plain data, and back.

The store keeps values without pickle (JSON + arrays), so the objects the phase-1
functions use -- ``SetLookup``, ``QueryLookup`` -- travel between nodes as dicts of
lists and one float32 matrix per set, and are rebuilt where a metric needs them.
Metric results travel as engine ``Result`` values: WEFE's ``result`` is the
``agg_value``, its other keys are ``extra``, a NaN's explanation is ``reason``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...engine import Result
from .lookup import Query, QueryLookup, SetLookup

__all__ = ["as_result", "lookup_from_value", "lookup_report", "lookup_value", "set_from_value",
           "set_value", "wefe_fields"]


# -- word sets and lookups --------------------------------------------------------------------
def set_value(s: SetLookup, variants: Any = None) -> dict[str, Any]:
    """A SetLookup as storable data (lists, one float32 matrix, no objects)."""
    return {
        "words": list(s.words),
        "variants": None if variants is None else [list(v) for v in variants],
        "found": list(s.found),
        "vectors": np.ascontiguousarray(s.vectors, dtype=np.float32),
        "positions": np.asarray(s.positions, dtype=np.int64),
        "not_found": list(s.not_found),
        "missing": list(s.missing),
    }


def set_from_value(v: dict[str, Any], name: str, kind: str) -> SetLookup:
    vectors = np.asarray(v["vectors"], dtype=np.float32)
    vectors.flags.writeable = False
    return SetLookup(
        name, kind, tuple(v["words"]), tuple(v["found"]), vectors,
        tuple(int(p) for p in v["positions"]), tuple(v["not_found"]), tuple(v["missing"]),
    )


def lookup_value(lk: QueryLookup, settings: dict[str, Any]) -> dict[str, Any]:
    def one(s: SetLookup) -> dict[str, Any]:
        return {"name": s.name, **set_value(s), "lost_fraction": s.lost_fraction}

    return {
        "query_name": lk.query_name,
        "reason": lk.reason,
        "lost_vocabulary_threshold": lk.lost_vocabulary_threshold,
        "settings": dict(settings),
        "targets": [one(s) for s in lk.targets],
        "attributes": [one(s) for s in lk.attributes],
    }


def lookup_from_value(v: dict[str, Any]) -> QueryLookup:
    """The stored lookup back as the ``QueryLookup`` every metric function takes."""
    targets = tuple(set_from_value(s, s["name"], "target") for s in v["targets"])
    attributes = tuple(set_from_value(s, s["name"], "attribute") for s in v["attributes"])
    query = Query(
        [s.words for s in targets], [s.words for s in attributes],
        [s.name for s in targets], [s.name for s in attributes],
    )
    return QueryLookup(
        query, targets, attributes, float(v["lost_vocabulary_threshold"]),
        dict(v.get("settings") or {}), v["reason"],
    )


def lookup_report(v: dict[str, Any]) -> dict[str, Any]:
    """The lookup without vectors: what WEAT_LOOKUP.json shows per query."""
    def strip(s: dict[str, Any]) -> dict[str, Any]:
        return {k: s[k] for k in ("name", "found", "missing", "not_found", "lost_fraction")}

    return {
        "query_name": v["query_name"],
        "reason": v["reason"],
        "lost_vocabulary_threshold": v["lost_vocabulary_threshold"],
        "settings": v["settings"],
        "targets": [strip(s) for s in v["targets"]],
        "attributes": [strip(s) for s in v["attributes"]],
    }


# -- results -------------------------------------------------------------------------------------
def as_result(fields: dict[str, Any]) -> Result:
    """A phase-1 result dict as a Result: ``result`` -> agg_value, ``reason`` -> reason."""
    fields = dict(fields)
    agg = fields.pop("result")
    reason = fields.pop("reason", None)
    return Result(agg, extra=fields, reason=reason)


def wefe_fields(result: Result) -> dict[str, Any]:
    """A metric node's Result back as WEFE's dict: query_name, result, the rest, reason."""
    extra = dict(result.extra)
    out: dict[str, Any] = {"query_name": extra.pop("query_name", None), "result": result.agg_value}
    out.update(extra)
    if result.reason:
        out["reason"] = result.reason
    return out
