"""Why a node is recomputed: one rule, read from what the cache remembers of its last run.

Every node has slots -- its display names, or for an unnamed parent each child's slot plus
the access key -- and each slot keeps the components of the fingerprint last stored there
in the cache's history. A node is remembered under all its slots, and read back from the
newest record among them: an unnamed node shared by several metrics (TOFU's ``qa_stats``)
finds its history whichever of them a run asks for, so a new checkpoint never says ``new``
for a node that ran before under another metric set.

When a node is not in the store, the first component that differs from that record names
the reason, checked in this order: ``corrupt-entry`` (the stored entry failed its
checksum), ``new`` (no slot of it ever ran in this cache), ``version``, ``code``,
``params``, then the resources it reads (``model`` when any changed resource is a model,
else ``data``), then ``parent`` (only its parents' fingerprints changed). So one change
reports the same word on every node that reads the changed resource -- a new checkpoint
``model`` on every model reader, a row edit ``data`` on every reader of that split -- and
``parent`` on the nodes below them that read none. A node whose components all equal the
record but whose entry is gone (cleared, pruned) is ``new`` again.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from .graph import Graph, Vertex


#: slots kept per node: enough for the metrics sharing a parent, bounded on wide graphs
MAX_SLOTS = 8


def remember(history: Any, slots: tuple[str, ...], components: dict) -> None:
    """Record ``components`` under every slot of a computed node (with when, to find the newest)."""
    record = {**components, "remembered_at": time.time()}
    for slot in slots:
        history.remember(slot, record)


def last(history: Any, slots: tuple[str, ...]) -> dict | None:
    """The newest record among a node's slots, or None when none of them ever ran."""
    found = [r for r in (history.last(s) for s in slots) if r is not None]
    when = lambda r: r.get("remembered_at") if isinstance(r.get("remembered_at"), (int, float)) else 0.0  # noqa: E731
    return max(found, key=when) if found else None


def recompute_reason(v: Vertex, slots: tuple[str, ...], store: Any, history: Any, rs: Any) -> str:
    """The reason ``v`` (at history ``slots``) is computed rather than read from ``store``."""
    if v.fingerprint in store.corrupt:
        return "corrupt-entry"
    old = last(history, slots)
    new = v.components or {}
    if old is None:
        return "new"
    if old.get("version") != new.get("version"):
        return "version"
    if old.get("code") != new.get("code"):
        return "code"
    if old.get("params") != new.get("params"):
        return "params"
    changed = [k for k, fp in new.get("resources", {}).items() if old.get("resources", {}).get(k) != fp]
    if changed:
        kinds = {rs.get(v.resources[k]).kind for k in changed}
        return "model" if "model" in kinds else "data"
    if old.get("parents") != new.get("parents"):
        return "parent"
    return "new"


def _short(slot: str) -> str:
    # an unnamed chain would grow the name by a key per step (quadratic on 10,000 nodes):
    # past 512 characters the slot is its own hash, still stable from run to run
    return slot if len(slot) <= 512 else "#" + hashlib.sha256(slot.encode()).hexdigest()


def history_slots(graph: Graph) -> dict[str, tuple[str, ...]]:
    """Stable place names per vertex for history: its display names, or (unnamed) each
    child's first slot plus each access key, in a fixed order, at most :data:`MAX_SLOTS`."""
    slots: dict[str, tuple[str, ...]] = {}
    for v in reversed(graph.order()):
        if v.names:
            names = [f"{g}/{n}" if g else n for g, n in v.names]
        else:
            names = [_short(f"{slots[child][0]}.{key}")
                     for child in sorted(graph.nx.successors(v.key), key=lambda c: slots[c][0])
                     for key in graph.nx.edges[v.key, child]["keys"]]
        slots[v.key] = tuple(dict.fromkeys(names))[:MAX_SLOTS] or (v.label,)
    return slots
