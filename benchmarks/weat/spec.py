"""The WEAT benchmark as a graph, and its report file.

Queries are word-set JSON entries (``word_sets.json``'s layout: query id -> target
sets, attribute sets, their names). Each query runs every WEFE metric whose template
takes it -- as users of WEFE's ``run_queries`` do -- or exactly the metrics asked for,
which are then checked against every query before anything runs. All queries share
one graph, so a word set used by several queries is looked up once and each
(target, attribute) cosine matrix is computed once.

``WEAT_EVAL.json`` is ``{query_id: {METRIC: {...WEFE's result fields, "agg_value"}}}``
with per-word contributions where the metric has them (WEAT's ``s_by_word``, RND's
``distance_by_word``, RNSB's probabilities, MAC's ``targets_eval``, RIPA's
``word_values``, ECT's ``similarities``); ``WEAT_LOOKUP.json`` holds, per query, the
found and missing words of every set and the reason a query is NaN.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...engine import Node, Result
from ...engine.outputs import jsonable
from ...engine.results import RunResult
from ...metrics.fairness.query import Query
from ...metrics.fairness.registry import metric_names, query_nodes, wefe_fields
from ...metrics.fairness.word_sets import lookup_report
from ..textfile import NotUTF8, read_utf8
from .config import WeatConfig

GROUP = "WEAT"
WORD_SETS = Path(__file__).with_name("word_sets.json")

#: Caliskan et al.'s (2017) WEAT 1-10, every query of word_sets.json, run when no query
#: file is given (sources: README.md next to word_sets.json)
STANDARD_QUERIES: tuple[str, ...] = (
    "weat1_flowers_insects",
    "weat2_instruments_weapons",
    "weat3_eur_afr_names",
    "weat4_eur_afr_names_2",
    "weat5_eur_afr_names_2_nosek",
    "weat6_names_career_family",
    "weat7_math_arts_gender",
    "weat8_science_arts_gender",
    "weat9_mental_physical",
    "weat10_young_old_names",
)


def load_queries(path: str | os.PathLike | None = None, ids: Sequence[str] | None = None) -> dict[str, Query]:
    """Query id -> query from a word-set JSON file (default: the standard package queries).

    A malformed entry is an error naming the file and the query id.
    """
    src = Path(path) if path is not None else WORD_SETS
    try:
        raw = json.loads(read_utf8(src))  # a BOM is accepted
    except FileNotFoundError:
        raise FileNotFoundError(f"query file not found: {src}") from None
    except NotUTF8:
        raise
    except ValueError as e:
        raise ValueError(f"{src}: not JSON ({e})") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{src}: expected an object query id -> query, got {type(raw).__name__}")
    wanted = list(ids) if ids is not None else (list(STANDARD_QUERIES) if path is None else list(raw))
    unknown = [q for q in wanted if q not in raw]
    if unknown:
        raise ValueError(f"{src}: no query {unknown}; known: {', '.join(raw)}")
    out = {}
    for qid in wanted:
        try:
            out[qid] = Query.model_validate(raw[qid])
        except ValidationError as e:
            raise ValueError(f"{src}: query {qid!r}: {_short(e)}") from None
        except TypeError as e:
            raise ValueError(f"{src}: query {qid!r}: {e}") from None
    return out


def _short(e: ValidationError) -> str:
    """pydantic's errors on one line each: 'field: message' (the input is already named)."""
    return "; ".join(
        (".".join(str(x) for x in err["loc"]) + ": " if err["loc"] else "") + err["msg"].removeprefix("Value error, ")
        for err in e.errors()
    )


def nodes(queries: dict[str, Query], metrics: Sequence[str] | None = None,
          cfg: WeatConfig | None = None, group: str = GROUP) -> list[Node]:
    """Every query's metric nodes; a template error is raised here, before anything runs."""
    cfg = cfg or WeatConfig()
    built = [query_nodes(qid, q, metrics, lookup=cfg.lookup, settings=cfg.settings,
                         source=cfg.source, group=group) for qid, q in queries.items()]
    return [n for ns in built for n in ns]


# -- the report -----------------------------------------------------------------------------
def _named(result: RunResult, group: str) -> list[tuple[str, str, str]]:
    """(vertex key, query id, part) for each ``query_id/part`` name in ``group``, roots first."""
    keys = list(result.graph.roots) + [k for k in result.graph.vertices if k not in result.graph.roots]
    out = []
    for key in keys:
        for g, name in result.graph.vertices[key].names:
            if g == group and "/" in name:
                qid, part = name.rsplit("/", 1)
                out.append((key, qid, part))
    return out


def eval_json(result: RunResult, group: str = GROUP) -> dict[str, dict[str, Any]]:
    """``{query_id: {METRIC: fields}}``; a metric that failed says so instead of a value."""
    out: dict[str, dict[str, Any]] = {}
    names = metric_names()
    for key, qid, part in _named(result, group):
        if part not in names:
            continue
        rec = result.records[key]
        if rec.status in ("computed", "cached"):
            value = result.value(f"{group}/{qid}/{part}")
            fields = wefe_fields(value) if isinstance(value, Result) else {"value": value}
            fields["agg_value"] = fields.get("result")
        else:
            fields = {"status": rec.status, "reason": rec.reason}
        out.setdefault(qid, {})[part] = fields
    return out


def lookup_json(result: RunResult, group: str = GROUP) -> dict[str, Any]:
    """``{query_id: found / missing words per set, the NaN reason}``."""
    out = {}
    for key, qid, part in _named(result, group):
        if part == "lookup" and result.records[key].status in ("computed", "cached"):
            out[qid] = lookup_report(result.value(f"{group}/{qid}/lookup"))
    return out


def _write(path: Path, obj: Any) -> None:
    # insertion order kept on purpose: WEFE orders distance_by_word by value, and
    # every per-word dict by the query's words
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False))
    os.replace(tmp, path)


def write_outputs(result: RunResult, out_dir: str | os.PathLike, group: str = GROUP) -> list[Path]:
    """Write ``<GROUP>_EVAL.json`` (replacing the engine's flat one) and ``<GROUP>_LOOKUP.json``."""
    if group not in result.graph.groups:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{group}_EVAL.json", out / f"{group}_LOOKUP.json"]
    _write(paths[0], eval_json(result, group))
    _write(paths[1], lookup_json(result, group))
    return paths
