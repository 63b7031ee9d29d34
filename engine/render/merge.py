"""One vertex per piece of work: the views' merge of vertices that share a fingerprint.

Two graph vertices can resolve to the same work: the retain and the reference model bound
to one checkpoint give two ``qa_stats`` vertices with one fingerprint; the engine computes
it once and caches it for the other. A picture that drew both would show work that was
never done twice, so every view (plan, run, sweep) goes through :func:`merge_same_work`
before it is drawn. Plain data in, plain data out: no import of the view model.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any


#: which of two records of one piece of work a merged vertex shows (the one that did the work)
_STATUS_RANK = {"failed": 0, "computed": 1, "skipped": 2, "cached": 3, "planned": 4, "input": 5}


def merge_same_work(nodes: list, edges: list) -> tuple[list, list]:
    """One vertex per fingerprint: two graph vertices that resolve to the same work (the
    retain and the reference model bound to one checkpoint) are one piece of work, computed
    once and cached for the other, so every picture draws them as one box carrying both
    names. Vertices without a fingerprint (an unresolved plan, resources) stay as they are."""
    first: dict[str, Any] = {}
    alias: dict[str, str] = {}
    kept: list = []
    for n in nodes:
        head = first.get(n.fingerprint) if n.fingerprint and n.kind != "resource" else None
        if head is None:
            if n.fingerprint and n.kind != "resource":
                first[n.fingerprint] = n
            kept.append(n)
            continue
        alias[n.id] = head.id
        head.names += [nm for nm in n.names if nm not in head.names]
        if _STATUS_RANK.get(n.status, 9) < _STATUS_RANK.get(head.status, 9):  # show the record that did the work
            head.status, head.seconds, head.reason, head.problem = n.status, n.seconds, n.reason, n.problem
            head.computed = n.computed
        if head.value is None:
            head.value = n.value
    if not alias:
        return nodes, edges
    merged: dict[tuple[str, str], Any] = {}
    for e in edges:
        src, dst = alias.get(e.src, e.src), alias.get(e.dst, e.dst)
        have = merged.get((src, dst))
        if have is None:
            merged[(src, dst)] = replace(e, src=src, dst=dst, keys=list(e.keys))
        else:
            have.keys = sorted(set(have.keys) | set(e.keys))
    return kept, list(merged.values())
