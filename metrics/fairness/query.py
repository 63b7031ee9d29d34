"""A WEFE query: target and attribute word sets with their names. The one query type.

``Query`` takes WEFE's constructor, ``Query(target_sets, attribute_sets,
target_sets_names, attribute_sets_names)``, and both layouts people write in JSON:
parallel lists (``benchmarks/weat/word_sets.json``: ``target_sets=[[...], [...]],
target_sets_names=[...]``, plus informational keys such as ``query_name`` and
``template``) and named sets (``{"target_sets": {"Flowers": [...], "Insects": [...]}}``).
Either way it holds WEFE's four attributes, as tuples: immutable and hashable. Set
order is kept, because WEFE's metrics are order-sensitive (WEAT's T1 vs T2, RNSB's
positive vs negative attribute set).

Refused, with a message naming the set: a set that is not a list of strings
(``TypeError``), an empty set, a name count that does not match, and duplicate set
names (WEFE keys sets by name, so the second set would silently overwrite the first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["INFO_KEYS", "Query"]

#: keys a word-set JSON entry may carry for people, not for the computation
INFO_KEYS = frozenset(
    {"query_name", "template", "description", "notes", "source",
     "target_sets_source", "attribute_sets_source"}
)
_FIELDS = ("target_sets", "attribute_sets", "target_sets_names", "attribute_sets_names")


def _join_names(names: Sequence[str]) -> str:
    if len(names) == 1:
        return str(names[0])
    return ", ".join(str(n) for n in names[:-1]) + " and " + str(names[-1])


def _check_set(words: Any, kind: str, i: int) -> tuple[str, ...]:
    if isinstance(words, str) or not isinstance(words, (Sequence, np.ndarray)):
        raise TypeError(f"{kind} set {i} must be a list of words, got {type(words).__name__}")
    out = tuple(words)
    for j, w in enumerate(out):
        if not isinstance(w, str):
            raise TypeError(f"{kind} set {i}, position {j}: {w!r} is not a str")
    if not out:
        raise ValueError(f"{kind} set {i} is empty")
    return out


def _names(names: Sequence[str] | None, n: int, default: str, kind: str) -> tuple[str, ...]:
    if names is None:
        return tuple(f"{default} {i}" for i in range(n))
    names = tuple(str(x) for x in names)
    if len(names) != n:
        raise ValueError(f"{n} {kind} set(s) but {len(names)} {kind} set name(s): {list(names)}")
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        raise ValueError(f"duplicate {kind} set name(s) {dup}: WEFE would silently merge them")
    return names


def _sets_and_names(sets: Any, names: Any, kind: str, default: str) -> tuple[tuple, tuple]:
    if isinstance(sets, Mapping):  # the named layout: names are the keys
        if names is not None:
            raise ValueError(f"{kind}_sets is a mapping name -> words; {kind}_sets_names must be left out")
        names, sets = list(sets), list(sets.values())
    if isinstance(sets, str):
        raise TypeError("target_sets and attribute_sets are lists of word lists, not strings")
    checked = tuple(_check_set(s, kind, i) for i, s in enumerate(sets or ()))
    return checked, _names(names, len(checked), default, kind)


class Query(BaseModel):
    """Target and attribute word sets with names (WEFE's ``Query``); hashable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target_sets: tuple[tuple[str, ...], ...]
    attribute_sets: tuple[tuple[str, ...], ...] = ()
    target_sets_names: tuple[str, ...]
    attribute_sets_names: tuple[str, ...] = ()

    def __init__(
        self,
        target_sets: Sequence[Sequence[str]] | Mapping[str, Sequence[str]] | None = None,
        attribute_sets: Sequence[Sequence[str]] | Mapping[str, Sequence[str]] = (),
        target_sets_names: Sequence[str] | None = None,
        attribute_sets_names: Sequence[str] | None = None,
        **info: Any,
    ):
        super().__init__(target_sets=target_sets, attribute_sets=attribute_sets,
                         target_sets_names=target_sets_names, attribute_sets_names=attribute_sets_names, **info)

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            if all(hasattr(data, n) for n in _FIELDS):  # a wefe.Query (or any look-alike)
                data = {n: getattr(data, n) for n in _FIELDS}
            else:
                return data  # pydantic says what is wrong
        extra = set(data) - set(_FIELDS) - INFO_KEYS
        if extra:
            raise ValueError(f"unknown query field(s) {sorted(extra)}")
        targets, t_names = _sets_and_names(data.get("target_sets"), data.get("target_sets_names"), "target", "Target set")
        if not targets:
            raise ValueError("a query needs at least one target set")
        attributes, a_names = _sets_and_names(data.get("attribute_sets"), data.get("attribute_sets_names"),
                                              "attribute", "Attribute set")
        template = data.get("template")
        if template is not None and tuple(template) != (len(targets), len(attributes)):
            raise ValueError(f"'template' says {tuple(template)} but the query has {(len(targets), len(attributes))} sets")
        return {"target_sets": targets, "attribute_sets": attributes,
                "target_sets_names": t_names, "attribute_sets_names": a_names}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Query:
        """From a word-set JSON entry (either layout, informational keys allowed)."""
        return cls.model_validate(d)

    @property
    def template(self) -> tuple[int, int]:
        return (len(self.target_sets), len(self.attribute_sets))

    @property
    def query_name(self) -> str:
        """WEFE's name: "T1 and T2 wrt A1 and A2" (", " before the last "and")."""
        target = _join_names(self.target_sets_names)
        if not self.attribute_sets_names:
            return target
        return target + " wrt " + _join_names(self.attribute_sets_names)
