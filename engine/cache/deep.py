"""``evaldag cache verify --deep``: recompute a sample of stored nodes and compare.

The checksum proves an entry is intact, not that it is right: the cache is not
authenticated, and whoever can write the folder can forge a value with a matching
checksum, fingerprint and type. The deep check recomputes what it can from the cache
alone: aggregators that read no resource, whose declaration (name, version, code
identity) is still the installed one and whose parents are stored. Their fresh value must
equal the stored one exactly (aggregators are deterministic CPU code). Scorers and
resource readers need the model and data, so they are counted as not checkable here.
"""

from __future__ import annotations

import inspect
import json
import random
from dataclasses import dataclass, field

import numpy as np

from ..declare import REGISTRY
from .codec import CorruptEntry, NewerFormat, encode
from .nodes import NodeStore


@dataclass
class DeepReport:
    checked: int = 0
    differ: list[str] = field(default_factory=list)
    not_checkable: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.not_checkable[why] = self.not_checkable.get(why, 0) + 1


def same_value(a: object, b: object) -> bool:
    """Exact equality of two values as the codec stores them (NaN equals NaN)."""
    sa, aa = encode(a)
    sb, ab = encode(b)
    if json.dumps(sa, sort_keys=True) != json.dumps(sb, sort_keys=True) or set(aa) != set(ab):
        return False
    return all(aa[k].dtype == ab[k].dtype and aa[k].shape == ab[k].shape
               and np.array_equal(aa[k], ab[k], equal_nan=aa[k].dtype.kind in "fc") for k in aa)


def verify_deep(nodes: NodeStore, sample: int = 50, seed: int = 0) -> DeepReport:
    rep = DeepReport()
    paths = list(nodes.entries())
    random.Random(seed).shuffle(paths)
    for p in paths:
        if rep.checked >= sample:
            break
        try:
            entry = nodes.read(p.stem)
        except NewerFormat:
            rep.skip("in a newer format")
            continue
        except (CorruptEntry, OSError):
            rep.skip("corrupt or unreadable (see verify)")
            continue
        comps = entry.meta.get("components") or {}
        m = REGISTRY.get(str(entry.meta.get("metric")))
        if m is None:
            rep.skip("metric not installed")
        elif m.scorer or m.needs or comps.get("resources"):
            rep.skip("needs a model or data")
        elif (m.version, m.code) != (comps.get("version"), comps.get("code")):
            rep.skip("declared by other code")
        else:
            _recompute(nodes, p, entry, m, comps, rep)
    return rep


def _recompute(nodes: NodeStore, p, entry, m, comps: dict, rep: DeepReport) -> None:
    kw = {}
    for key, fp in (comps.get("parents") or {}).items():
        parent = nodes.get(fp)
        if parent is None:
            rep.skip("a parent is not stored")
            return
        kw[key] = parent.value
    try:
        params = m.params(**(comps.get("params") or {}))
        if "params" in inspect.signature(m.fn).parameters:
            kw["params"] = params
        fresh = m.fn(**kw)
    except Exception as e:  # noqa: BLE001 - a metric that fails now cannot vouch for its entry
        rep.skip(f"recomputation failed ({type(e).__name__})")
        return
    rep.checked += 1
    if not same_value(fresh, entry.value):
        rep.differ.append(f"{p}: stored value of {entry.meta.get('node', m.name)} differs from a recomputation")
