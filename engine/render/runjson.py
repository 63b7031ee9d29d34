"""Reading ``run.json`` as untrusted input: every field checked against its type.

A run folder is often someone else's (a colleague's, a cluster's, one downloaded with a
bug report), and ``run.json`` is plain text anyone can edit. The renderers escape what
they print, but they also *compute* with these values (seconds are formatted, statuses
pick colours and CSS classes, parents become edges), so a value of the wrong type must
not reach them either. This module is the one place a run.json is read: each field is
validated on its own against the shape below (a pydantic model per record), a field of
the wrong type is dropped (its default takes over) and the reader prints one warning
line naming the file and the keys, never a traceback. Keys it does not know are kept
as they are (plugins may read their own; they escape what they print).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

STATUSES = ("planned", "cached", "computed", "failed", "skipped", "input")
KINDS = ("scorer", "aggregator", "resource")

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
Count = Annotated[float, Field(allow_inf_nan=False, strict=True)]


class Origin(BaseModel):
    """A cached node's account of the run that computed it (``computed`` in run.json)."""

    model_config = ConfigDict(strict=True, extra="allow")

    at: Optional[StrictStr] = None
    seconds: Optional[Seconds] = None
    reason: StrictStr = ""
    backend: dict[StrictStr, StrictStr] = {}


class NodeEntry(BaseModel):
    """One node's record in run.json (``outputs/files.py`` writes it)."""

    model_config = ConfigDict(strict=True, extra="allow")

    fingerprint: Optional[StrictStr] = None
    status: Literal[STATUSES] = "planned"  # type: ignore[valid-type]
    seconds: Optional[Seconds] = None
    reason: StrictStr = ""
    error: StrictStr = ""
    metric: Optional[StrictStr] = None
    kind: Literal[KINDS] = "aggregator"  # type: ignore[valid-type]
    version: Optional[StrictStr] = None
    parents: dict[StrictStr, StrictStr] = {}
    names: Optional[list[StrictStr]] = None
    params: dict[StrictStr, Any] = {}
    params_not_default: Optional[dict[StrictStr, Any]] = None
    params_changed: Optional[dict[StrictStr, Any]] = None  # the older name of params_not_default
    resources: dict[StrictStr, StrictStr] = {}
    computed: dict = {}  # checked on its own (Origin)


class KindStats(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    requests: Optional[Count] = None
    unique: Optional[Count] = None
    cached: Optional[Count] = None
    sequences_forwarded: Optional[Count] = None
    batches: Optional[Count] = None
    padding_fraction: Optional[Count] = None
    seconds: Optional[Seconds] = None


class Executor(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    model_loaded: Optional[StrictBool] = None
    requests: Optional[Count] = None
    unique: Optional[Count] = None
    cached: Optional[Count] = None
    sequences_forwarded: Optional[Count] = None
    generations: Optional[Count] = None
    batches: Optional[Count] = None
    oom_retries: Optional[Count] = None
    tokens_real: Optional[Count] = None
    tokens_padded: Optional[Count] = None
    padding_fraction: Optional[Count] = None
    seconds: Optional[Seconds] = None
    by_kind: dict = {}  # request kind -> KindStats, each checked on its own


class Provenance(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    resources: dict[StrictStr, dict] = {}
    command: list[Any] = []


class RunJson(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    nodes: dict = {}  # name -> record; each record is checked on its own (NodeEntry)
    executor: dict = {}
    wall_seconds: Optional[Seconds] = None
    provenance: dict[StrictStr, Any] = {}
    benchmarks: list[StrictStr] = []
    refresh: StrictStr = "none"
    retain_logs_written: dict[StrictStr, StrictStr] = {}  # GROUP -> the retain side's file beside run.json


_WARNED: set[tuple[str, int]] = set()  # (file, hash of its text): warn once per version of a file


def _check(model: type[BaseModel], data: Any, where: str, bad: list[str]) -> dict:
    """``data`` with every field of ``model`` that fails its type dropped (named in ``bad``)."""
    if not isinstance(data, dict):
        bad.append(f"{where} (not an object)")
        return {}
    out = {}
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            out[key] = value  # a key this reader does not know: kept for whoever does
            continue
        try:  # every field has a default, so the model checks one key alone
            out[key] = getattr(model.model_validate({key: value}), key)
        except ValidationError:
            bad.append(f"{where}.{key}")
    return out


def _tidy(run: dict, bad: list[str]) -> dict:
    run = _check(RunJson, run, "run", bad)
    nodes = {}
    for name, entry in (run.get("nodes") or {}).items():
        where = f"nodes[{_printable(json.dumps(name), 32)}]"
        nodes[name] = _check(NodeEntry, entry, where, bad)
        if "computed" in nodes[name]:
            nodes[name]["computed"] = _check(Origin, nodes[name]["computed"], f"{where}.computed", bad)
    if "nodes" in run:
        run["nodes"] = nodes
    if "executor" in run:
        ex = _check(Executor, run["executor"], "executor", bad)
        ex["by_kind"] = {k: _check(KindStats, v, f"executor.by_kind[{_printable(json.dumps(k), 32)}]", bad)
                         for k, v in (ex.get("by_kind") or {}).items()}
        run["executor"] = ex
    if "provenance" in run:
        run["provenance"] = _check(Provenance, run["provenance"], "provenance", bad)
    return run


def read_run_json(path: str | os.PathLike, *, warn: bool = True) -> dict:
    """run.json as a dict whose known fields all have their documented types.

    Raises ``ValueError`` (naming the file) when it is not JSON or not an object; a
    field of the wrong type is dropped with one warning line on stderr per file.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path}: not valid JSON ({str(e)[:120]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: run.json must hold a JSON object, not a {type(data).__name__}")
    bad: list[str] = []
    run = _tidy(data, bad)
    if bad and warn and (str(path), hash(text)) not in _WARNED:
        _WARNED.add((str(path), hash(text)))
        shown = ", ".join(_printable(b, 120) for b in bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else "")
        print(f"evaldag: warning: {_printable(str(path), 300)}: ignored {len(bad)} field(s) of the wrong type: {shown}",
              file=sys.stderr)
    return run


def _printable(s: str, limit: int = 80) -> str:
    """A key as the warning line shows it: one line, control characters escaped, bounded."""
    s = s.encode("unicode_escape").decode("ascii")
    return s if len(s) <= limit else s[: limit - 1] + "…"

