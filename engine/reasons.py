"""Why a node is recomputed: one rule, read from what the cache remembers of its last run.

Every node slot (a display name, or its child's slot plus the access key for an unnamed
parent) keeps the components of its last stored fingerprint in the cache's history. When
a node is not in the store, the first component that differs from that record names the
reason, checked in this order: ``corrupt-entry`` (the stored entry failed its checksum),
``new`` (the slot never ran in this cache), ``version``, ``code``, ``params``, then the
resources it reads (``model`` when any changed resource is a model, else ``data``), then
``parent`` (only its parents' fingerprints changed). A slot whose components are all
equal to the record but whose entry is gone (cleared, pruned) is ``new`` again.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .graph import Graph, Vertex


def recompute_reason(v: Vertex, slot: str, store: Any, history: Any, rs: Any) -> str:
    """The reason ``v`` (at history slot ``slot``) is computed rather than read from ``store``."""
    if v.fingerprint in store.corrupt:
        return "corrupt-entry"
    old = history.last(slot)
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


def history_slots(graph: Graph) -> dict[str, str]:
    """A stable place name per vertex (display name, or child slot + access key) for history."""
    slots: dict[str, str] = {}
    for v in reversed(graph.order()):
        if v.names:
            g, n = v.names[0]
            slots[v.key] = f"{g}/{n}" if g else n
            continue
        for child in sorted(graph.nx.successors(v.key), key=lambda c: slots.get(c, "")):
            keys = graph.nx.edges[v.key, child]["keys"]
            slot = f"{slots[child]}.{keys[0]}"
            # an unnamed chain would grow the name by a key per step (quadratic on 10,000 nodes):
            # past 512 characters the slot is its own hash, still stable from run to run
            slots[v.key] = slot if len(slot) <= 512 else "#" + hashlib.sha256(slot.encode()).hexdigest()
            break
        else:
            slots[v.key] = v.label
    return slots
