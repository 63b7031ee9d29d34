"""What a user asks of the graph: a query of named word sets, and how its words are looked up.

``WordSetQuery`` is the pydantic form of a WEFE query. It reads both layouts people
have: named sets (``{"target_sets": {"Flowers": [...], "Insects": [...]}, ...}``) and
WEFE's parallel lists (``target_sets=[[...], [...]], target_sets_names=[...]``, the
layout of ``benchmarks/weat/word_sets.json``). Set order is kept: WEFE's metrics are
order-sensitive (WEAT's T1 vs T2, RNSB's positive vs negative attribute set).
Validation is delegated to the phase-1 :class:`~.lookup.Query`, so both forms refuse
the same things (empty sets, duplicate names, non-string words).

``LookupOptions`` carries WEFE's lookup arguments (preprocessors, strategy, normalize,
the lost-vocabulary threshold, a vocabulary prefix). A preprocessor may hold a
callable, which no fingerprint can hash; so nodes never see the options themselves,
only what they do to the words (``variants``): the key each preprocessor makes of each
word. Two configurations that make the same keys are the same work, and a changed
callable changes the keys, hence the fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from .lookup import Query, lookup_query, preprocess_word
from .word_vectors import WordVectors

__all__ = ["INFO_KEYS", "LookupOptions", "WordSetQuery", "describe_preprocessors"]

#: keys a word-set JSON entry may carry for people, not for the computation
INFO_KEYS = frozenset(
    {"query_name", "template", "description", "notes", "source",
     "target_sets_source", "attribute_sets_source"}
)


class WordSetQuery(BaseModel):
    """Named target and attribute word sets (insertion order is the metric's order)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target_sets: dict[str, tuple[str, ...]]
    attribute_sets: dict[str, tuple[str, ...]] = {}

    @model_validator(mode="before")
    @classmethod
    def _accept_wefe_layout(cls, data: Any) -> Any:
        """Lists + names (WEFE's constructor, word_sets.json) become named sets."""
        if isinstance(data, Query):
            return _named(data)
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        template = data.get("template")
        extra = set(data) - {"target_sets", "attribute_sets", "target_sets_names",
                             "attribute_sets_names"} - INFO_KEYS
        if extra:
            raise ValueError(f"unknown query field(s) {sorted(extra)}")
        if isinstance(data.get("target_sets"), Mapping):
            out = {"target_sets": data["target_sets"],
                   "attribute_sets": data.get("attribute_sets") or {}}
        else:
            if not data.get("target_sets"):
                raise ValueError("a query needs target_sets")
            out = _named(Query(
                data["target_sets"], data.get("attribute_sets") or (),
                data.get("target_sets_names"), data.get("attribute_sets_names"),
            ))
        if template is not None:
            given = (len(out["target_sets"]), len(out["attribute_sets"]))
            if tuple(template) != given:
                raise ValueError(f"'template' says {tuple(template)} but the query has {given} sets")
        return out

    @model_validator(mode="after")
    def _check_sets(self) -> WordSetQuery:
        self.to_query()  # empty sets, non-string words: refused exactly as Query does
        return self

    @classmethod
    def from_wefe(
        cls,
        target_sets: Sequence[Sequence[str]],
        attribute_sets: Sequence[Sequence[str]] = (),
        target_sets_names: Sequence[str] | None = None,
        attribute_sets_names: Sequence[str] | None = None,
    ) -> WordSetQuery:
        """WEFE's ``Query(...)`` arguments, defaults for missing names included."""
        return cls.model_validate(Query(target_sets, attribute_sets, target_sets_names, attribute_sets_names))

    def to_query(self) -> Query:
        """The phase-1 dataclass the metric functions take."""
        return Query(
            list(self.target_sets.values()), list(self.attribute_sets.values()),
            list(self.target_sets), list(self.attribute_sets),
        )

    @property
    def template(self) -> tuple[int, int]:
        return (len(self.target_sets), len(self.attribute_sets))

    @property
    def query_name(self) -> str:
        return self.to_query().query_name


def _named(q: Query) -> dict[str, dict[str, tuple[str, ...]]]:
    return {
        "target_sets": dict(zip(q.target_sets_names, q.target_sets, strict=True)),
        "attribute_sets": dict(zip(q.attribute_sets_names, q.attribute_sets, strict=True)),
    }


class LookupOptions(BaseModel):
    """WEFE's lookup arguments. Validated once, by running them through ``lookup_query``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, arbitrary_types_allowed=True)

    lost_vocabulary_threshold: float = 0.2
    preprocessors: tuple[dict[str, Any], ...] = ({},)
    strategy: Literal["first", "all"] = "first"
    normalize: bool = False
    vocab_prefix: str | None = None

    @field_validator("preprocessors", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        if isinstance(v, Mapping):  # one dict instead of a list of dicts: a common slip
            raise ValueError("preprocessors is a list of dicts, e.g. [{}, {'lowercase': True}]")
        return tuple(dict(p) if isinstance(p, Mapping) else p for p in v)

    @model_validator(mode="after")
    def _validate_with_lookup(self) -> LookupOptions:
        # The phase-1 lookup owns the rules (unknown keys, strip_accents values, the
        # threshold's range): ask it, on an empty vocabulary, instead of restating them.
        empty = WordVectors([], np.zeros((0, 1), np.float32), source="<validation>")
        lookup_query(empty, Query([["x"]]), **self.lookup_kwargs())
        return self

    def lookup_kwargs(self) -> dict[str, Any]:
        return {
            "lost_vocabulary_threshold": self.lost_vocabulary_threshold,
            "preprocessors": list(self.preprocessors),
            "strategy": self.strategy,
            "normalize": self.normalize,
            "vocab_prefix": self.vocab_prefix,
        }

    def variants(self, words: Sequence[str]) -> tuple[tuple[str, ...], ...] | None:
        """The key each preprocessor makes of each word; None when it is the word itself."""
        out = tuple(
            tuple(preprocess_word(w, p, self.vocab_prefix) for w in words) for p in self.preprocessors
        )
        return None if out == (tuple(words),) else out

    def describe(self) -> dict[str, Any]:
        """JSON-able settings for the lookup report (callables by their qualified name)."""
        return {
            "preprocessors": describe_preprocessors(self.preprocessors),
            "strategy": self.strategy,
            "normalize": self.normalize,
            "vocab_prefix": self.vocab_prefix,
        }


def describe_preprocessors(preprocessors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    def name(fn: Callable[..., Any]) -> str:
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", repr(fn))
        return f"{module}.{qualname}" if module else qualname

    return [{k: name(v) if callable(v) else v for k, v in p.items()} for p in preprocessors]

