"""What metrics return and what a run leaves behind.

* :class:`Result`: the value a metric returns, open-unlearning's ``{"agg_value",
  "value_by_index"}`` shape. ``agg_value`` is the headline number (or None when the
  metric cannot be computed, e.g. forget quality without retain logs), ``value_by_index``
  the per-item values keyed by the item's row position as a string, ``extra`` any other
  top-level keys the reference format has (an MIA's ``forget``/``holdout``/``auc``), and
  ``reason`` says why a value is NaN or None, so no NaN is ever silent.
* :class:`NodeRecord`: how one vertex fared; :class:`RunResult`: per-node records,
  values on demand (from the cache), executor statistics, provenance.
"""

from __future__ import annotations

import math
import os
import platform
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import networkx as nx

from .adapters.chat_quirks import with_chat_facts
from .cache import Cache, codec
from .graph import Graph, Vertex
from .hooks import display
from .redact import redact

STATUSES = ("computed", "cached", "failed", "skipped")
ALL_GROUPS = "*"  # results()/summary() of every group; group=None selects the nodes without one


@dataclass
class Result:
    agg_value: Any = None
    value_by_index: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    def _repr_html_(self) -> str:
        """Jupyter's table: the value, the reason, the number of items, the extra keys (``notebook.py``)."""
        return display("result_html", self)

    def __post_init__(self) -> None:
        if self.value_by_index is not None:
            self.value_by_index = {str(k): v for k, v in self.value_by_index.items()}
        if self.reason is None and isinstance(self.agg_value, float) and math.isnan(self.agg_value):
            self.reason = "NaN (no reason given by the metric)"

    def to_dict(self) -> dict[str, Any]:
        """The reference's per-metric shape (extra keys first, as open-unlearning orders MIAs)."""
        out: dict[str, Any] = dict(self.extra)
        out["agg_value"] = self.agg_value
        if self.value_by_index is not None:
            out["value_by_index"] = self.value_by_index
        if self.reason:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Result":
        d = dict(d)
        agg = d.pop("agg_value", None)
        vbi = d.pop("value_by_index", None)
        reason = d.pop("reason", None)
        return cls(agg_value=agg, value_by_index=vbi, extra=d, reason=reason)

    @classmethod
    def nan(cls, reason: str, **extra: Any) -> "Result":
        return cls(agg_value=float("nan"), reason=reason, extra=extra)

codec.register("__result__", Result, Result.to_dict, Result.from_dict)

NONFINITE = "non-finite logits"


def nonfinite_flag(model_name: str) -> str:
    """The note every value computed from a model with NaN/inf logits carries (reason, terminal)."""
    return f"{NONFINITE} (NaN/inf) from model {model_name}: values computed from it are not trustworthy"


def flagged(value: Any, flag: str) -> Any:
    """``value`` with ``flag`` leading its reason (a Result); other values are returned as they are."""
    if not isinstance(value, Result) or (value.reason or "").startswith(flag):
        return value
    return Result(value.agg_value, value.value_by_index, dict(value.extra),
                  f"{flag}; {value.reason}" if value.reason else flag)


@dataclass
class NodeRecord:
    """How one vertex fared: status, seconds, why it was (re)computed, the error if any.

    ``reason`` is always a recompute reason (new, params, parent, data, model, version,
    code, corrupt-entry; empty when cached), also for a node that then failed or was skipped;
    ``error`` holds the traceback of a failure or the cause of a skip.
    """

    key: str
    name: str
    fingerprint: str
    status: str
    seconds: float = 0.0
    reason: str = ""
    error: str = ""
    backend: dict = field(default_factory=dict)  # run resource -> the backend that served it (scorers)
    origin: dict = field(default_factory=dict)  # a cached node: when and how its stored value was computed

    @classmethod
    def cached(cls, v: Vertex, meta: dict | None = None) -> "NodeRecord":
        """A node read from the store; ``meta`` (the entry's) says when, in how long, why
        and by which backend it was computed, so a warm run's records lose nothing."""
        return cls(v.key, v.label, v.fingerprint, "cached", origin=origin_of(meta or {}))

    @classmethod
    def computed(cls, v: Vertex, seconds: float, reason: str) -> "NodeRecord":
        return cls(v.key, v.label, v.fingerprint, "computed", seconds, reason)

    @classmethod
    def failed(cls, v: Vertex, seconds: float, error: str, reason: str) -> "NodeRecord":
        return cls(v.key, v.label, v.fingerprint, "failed", seconds, reason, error)

    @classmethod
    def skipped(cls, v: Vertex, why: str, reason: str) -> "NodeRecord":
        return cls(v.key, v.label, v.fingerprint, "skipped", 0.0, reason, why)

    @property
    def problem(self) -> str:
        """One line: why a node failed (the exception) or was skipped (which parent)."""
        return self.error.strip().splitlines()[-1] if self.error.strip() else ""

    @classmethod
    def twin(cls, v: Vertex, head: "NodeRecord") -> "NodeRecord":
        return cls(v.key, v.label, v.fingerprint, head.status, head.seconds, head.reason, head.error,
                   origin=dict(head.origin))

    def to_json(self) -> dict:
        out = {"fingerprint": self.fingerprint, "status": self.status, "seconds": round(self.seconds, 6), "reason": self.reason}
        if self.error:
            out["error"] = self.error
        if self.backend:
            out["backend"] = dict(self.backend)
        if self.origin:
            out["computed"] = dict(self.origin)
        return out


def origin_of(meta: dict) -> dict:
    """A store entry's account of its computation, as run.json's ``computed`` holds it:
    ``at`` (UTC, ISO 8601), ``seconds``, ``reason``, ``backend``; what the entry lacks is left out."""
    out: dict = {}
    at = meta.get("written_at")
    if isinstance(at, (int, float)) and math.isfinite(at):
        out["at"] = datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds")
    secs = meta.get("seconds")
    if isinstance(secs, (int, float)) and math.isfinite(secs) and secs >= 0:
        out["seconds"] = round(float(secs), 6)
    if isinstance(meta.get("reason"), str) and meta["reason"]:
        out["reason"] = meta["reason"]
    if isinstance(meta.get("backend"), dict) and meta["backend"]:
        out["backend"] = {str(k): str(b) for k, b in meta["backend"].items()}
    return out


@dataclass
class RunResult:
    graph: Graph
    cache: Cache
    records: dict[str, NodeRecord]
    loaded: dict[str, Any] = field(default_factory=dict)
    executor: dict = field(default_factory=dict)
    wall_seconds: float = 0.0
    provenance: dict = field(default_factory=dict)
    routed: list[str] = field(default_factory=list)  # run resources with a --fallback: their numbers name a backend
    out: Path | None = None  # the folder its files were last written to (export names the run by it)
    lock_wait_seconds: float = 0.0  # of wall_seconds, the time spent waiting for other processes' nodes

    @property
    def ok(self) -> bool:
        return all(r.status in ("computed", "cached") for r in self.records.values())

    def __repr__(self) -> str:
        """One line (the dataclass repr printed every loaded array): ok, node counts, seconds."""
        counts = ", ".join(f"{self.count(s)} {s}" for s in STATUSES if self.count(s))
        return f"<RunResult ok={self.ok} nodes={len(self.records)} ({counts or 'none'}) wall={self.wall_seconds:.2f}s>"

    def _repr_html_(self) -> str:
        """Jupyter's view: a one-line status, the metrics table and the DAG with statuses (``notebook.py``)."""
        return display("run_result_html", self)

    def to_pandas(self, run: str = "") -> Any:
        """The headline values as a long table (run, model, benchmark, metric, split, value, step), the
        rows ``evaldag export`` writes (``export.py``); pandas: ``pip install 'evaldag[pandas]'``."""
        return display("to_pandas", self, run)

    def value(self, name: str) -> Any:
        """A node's value by display name (loaded from the store if it was cached)."""
        v = self.graph.find(name)
        if v.key not in self.loaded:
            entry = self.cache.nodes.get(v.fingerprint)
            if entry is None:
                rec = self.records.get(v.key)
                raise KeyError(f"{name}: no value ({rec.status if rec else 'not run'}: {rec.reason if rec else ''})")
            self.loaded[v.key] = entry.value
        return self.loaded[v.key]

    __getitem__ = value

    def record(self, name: str) -> NodeRecord:
        return self.records[self.graph.find(name).key]

    def count(self, status: str) -> int:
        return sum(1 for r in self.records.values() if r.status == status)

    def failures(self) -> list[NodeRecord]:
        return [r for r in self.records.values() if r.status == "failed"]

    def results(self, group: str | None = ALL_GROUPS) -> dict[str, Any]:
        """Display name -> value for every named node (of ``group``; None: ungrouped) that has a value."""
        out = {}
        for v in self.graph.order():
            for g, n in v.names:
                if group != ALL_GROUPS and g != group:
                    continue
                rec = self.records.get(v.key)
                if rec and rec.status in ("computed", "cached"):
                    out[n] = self.value(f"{g}/{n}" if g else n)
        return out

    def served_by(self, group: str | None = ALL_GROUPS) -> dict[str, dict[str, str]]:
        """Display name -> {routed run resource: the backend(s) its value rests on}, read from the
        records of the node and its ancestor scorers; empty when no resource has a ``--fallback``
        (every number is then its model's one backend's, and the files keep their plain shape)."""
        if not self.routed:
            return {}
        out = {}
        for v in self.graph.order():
            for g, n in v.names:
                if group != ALL_GROUPS and g != group:
                    continue
                by: dict[str, set[str]] = {}
                for k in {v.key} | nx.ancestors(self.graph.nx, v.key):
                    rec = self.records.get(k)
                    for res, label in (rec.backend if rec else {}).items():
                        if res in self.routed:
                            by.setdefault(res, set()).add(str(label))
                if by:
                    out[n] = {res: " + ".join(sorted(labels)) for res, labels in sorted(by.items())}
        return out

    def summary(self, group: str | None = ALL_GROUPS) -> dict[str, Any]:
        """Top-level requested metric -> agg_value; metrics without a value are left out.

        open-unlearning's ``<BENCH>_SUMMARY.json`` omits a metric whose value is None
        (forget quality without retain logs); so does this. run.json says why.
        """
        out = {}
        for key in self.graph.roots:
            v = self.graph.vertices[key]
            for g, n in v.names[:1] or [(v.node.group, v.label)]:
                if group != ALL_GROUPS and g != group:
                    continue
                rec = self.records.get(key)
                val = self.value(f"{g}/{n}" if g and v.names else v.label) if rec and rec.status in ("computed", "cached") else None
                agg = val.agg_value if isinstance(val, Result) else val
                if agg is not None and (isinstance(val, Result) or _plain_number(val)):  # not a scorer's raw arrays
                    out[n] = agg
        return out


def _plain_number(x: Any) -> bool:
    return isinstance(x, (int, float)) or (type(x).__module__ == "numpy" and getattr(x, "ndim", None) == 0)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def provenance(resources: Any, graph: Graph | None = None, extra: dict | None = None) -> dict:
    """What names a run a week later: versions, the command line, and each resource it read.

    Versions are read from package metadata (importing torch would cost seconds).
    ``resources`` maps each resource the graph reads to its kind, fingerprint and the
    resource's own ``describe()`` (a model's path, dtype and device; a dataset's source;
    retain logs' file); ``templates`` the distinct prompt templates in node params.
    """
    out: dict[str, Any] = {
        "evaldag": _version("evaldag"), "torch": _version("torch"), "transformers": _version("transformers"),
        "python": platform.python_version(), "command": list(sys.argv), "cwd": os.getcwd(),
    }
    models = resources.model_fingerprints() if resources is not None else {}
    out["model_fingerprint"] = models.get("model")
    out["models"] = models
    if graph is not None and resources is not None:
        out["resources"] = {name: describe_resource(resources.get(name)) for name in sorted(graph.required_resources())}
        templates = []
        for v in graph.order():
            t = v.components.get("params", {}).get("template") if isinstance(v.components, dict) and isinstance(v.components.get("params"), dict) else None
            if t is not None and t not in templates:
                templates.append(t)
        out["templates"] = templates
        added = system_prompts_added(out["resources"], templates)
        if added:
            out["system_prompt_added"] = added
    out.update(extra or {})
    return redact(out)  # a token in a path, URL or --api-key value never reaches run.json or the report


def system_prompts_added(resources: dict, templates: list) -> dict[str, str]:
    """Per model resource, the default system prompt its chat template wrote into every prompt:
    a chat template in the run's node params with no system prompt of its own."""
    if not any(isinstance(t, dict) and t.get("apply_chat_template") and not t.get("system_prompt") for t in templates):
        return {}
    return {name: d["chat_default_system_prompt"] for name, d in sorted(resources.items())
            if isinstance(d, dict) and isinstance(d.get("chat_default_system_prompt"), str)}


def describe_resource(res: Any) -> dict:
    """A resource's kind, fingerprint and ``describe()`` (a provider's inputs, recursively)."""
    out: dict[str, Any] = {"kind": getattr(res, "kind", "other"), "fingerprint": res.fingerprint()}
    try:
        out.update(res.describe() if hasattr(res, "describe") else {})
    except Exception as e:  # noqa: BLE001 - provenance must never fail a finished run
        out["describe_error"] = f"{type(e).__name__}: {e}"
    if out["kind"] == "model":
        with_chat_facts(out, res)  # the system prompt its chat template writes when a conversation has none
    inputs = getattr(res, "inputs", None)
    if isinstance(inputs, dict):
        out["inputs"] = {k: describe_resource(r) for k, r in sorted(inputs.items())}
    return out
