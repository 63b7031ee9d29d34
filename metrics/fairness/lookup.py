"""Queries and the WEFE-compatible word -> vector lookup.

``lookup_query`` maps a :class:`~.query.Query` onto a
``WordVectors`` exactly as ``wefe.preprocessing.get_embeddings_from_query`` does in
WEFE 1.0.1, because every metric value depends on which vectors survive:

* each word is passed through the preprocessors in order; a preprocessor dict may set
  ``lowercase`` / ``uppercase`` / ``titlecase`` (exclusive, in that priority),
  ``strip_accents`` (``True`` = ``'unicode'``, or ``'ascii'``) and ``preprocessor``
  (a callable that replaces all of the above); ``vocab_prefix`` is prepended last;
* ``strategy='first'`` keeps the first variant found, ``'all'`` every variant found;
* found vectors are keyed by the *preprocessed* word, in first-seen order, so duplicate
  words (or two words that preprocess alike) collapse into one entry -- and still
  count as lost in the lost-vocabulary rule, as in WEFE;
* a set loses ``(len(words) - len(found)) / len(words)``; if any set loses *more* than
  ``lost_vocabulary_threshold``, the whole query is NaN. WEFE only logs this; here the
  result carries a ``reason`` naming the sets, their losses and missing words;
* ``normalize=True`` divides each found vector by its own norm (float32, as WEFE).

One deliberate difference, a refusal of input WEFE silently mis-handles: unknown
preprocessor keys or ``strip_accents`` values raise (WEFE ignores them, so its own
docstring's ``{'lowecase': True}`` is a silent no-op). ``LookupOptions`` carries these
arguments as one validated value (see its docstring for how nodes see them).
"""

from __future__ import annotations

import numbers
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from .query import Query
from .vectors import WordVectors

__all__ = [
    "LookupOptions",
    "QueryLookup",
    "SetLookup",
    "lookup_query",
    "preprocess_word",
    "strip_accents_ascii",
    "strip_accents_unicode",
]

PREPROCESSOR_KEYS = frozenset(
    {"lowercase", "uppercase", "titlecase", "strip_accents", "preprocessor"}
)


# -- preprocessing ---------------------------------------------------------------------
def strip_accents_unicode(text: str) -> str:
    """Drop combining marks after NFKD decomposition ('é' -> 'e', 'ß' stays)."""
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def strip_accents_ascii(text: str) -> str:
    """NFKD, then drop every non-ASCII character ('ß' and 'ø' vanish entirely)."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def _check_preprocessor(options: Any, position: int) -> None:
    if not isinstance(options, Mapping):
        raise TypeError(f"preprocessor {position} must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - PREPROCESSOR_KEYS)
    if unknown:
        raise ValueError(
            f"preprocessor {position}: unknown option(s) {unknown}; "
            f"allowed: {sorted(PREPROCESSOR_KEYS)}"
        )
    sa = options.get("strip_accents", False)
    if not (isinstance(sa, bool) or sa in ("ascii", "unicode")):
        raise ValueError(
            f"preprocessor {position}: strip_accents must be True, False, 'ascii' or "
            f"'unicode', got {sa!r}"
        )
    fn = options.get("preprocessor")
    if fn is not None and not callable(fn):
        raise TypeError(f"preprocessor {position}: 'preprocessor' must be callable, got {fn!r}")


def preprocess_word(word: str, options: Mapping[str, Any], vocab_prefix: str | None = None) -> str:
    """One word through one preprocessor dict, as WEFE's ``preprocess_word``."""
    fn: Callable[[str], str] | None = options.get("preprocessor")
    if fn is not None:
        word = fn(word)
    else:
        if options.get("lowercase", False):
            word = word.lower()
        elif options.get("uppercase", False):
            word = word.upper()
        elif options.get("titlecase", False):
            word = word.title()
        sa = options.get("strip_accents", False)
        if sa is True or sa == "unicode":
            word = strip_accents_unicode(word)
        elif sa == "ascii":
            word = strip_accents_ascii(word)
    return word if vocab_prefix is None else vocab_prefix + word


# -- lookup results ----------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class SetLookup:
    """One word set after lookup.

    ``found`` are the keys WEFE's dict would hold (preprocessed words, first-seen
    order, no duplicates), ``vectors`` their rows (float32, read-only). ``positions``
    maps each requested word to the row of its first found variant, or -1; it lets a
    metric pair words by their place in the query rather than in ``found``.
    ``not_found`` is WEFE's list: every preprocessed variant tried and missed, even
    for words a later preprocessor found. ``missing`` are the requested words for which
    no variant was found.
    """

    name: str
    kind: str
    words: tuple[str, ...]
    found: tuple[str, ...]
    vectors: np.ndarray
    positions: tuple[int, ...]
    not_found: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def lost_fraction(self) -> float:
        """WEFE's measure: ``(len(words) - len(found)) / len(words)``.

        Duplicates count as lost (they collapse in ``found``) and with
        ``strategy='all'`` the value can be negative.
        """
        return (len(self.words) - len(self.found)) / len(self.words)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "found": list(self.found),
            "missing": list(self.missing),
            "not_found": list(self.not_found),
            "lost_fraction": self.lost_fraction,
        }


@dataclass(frozen=True, eq=False)
class QueryLookup:
    """A query's sets after lookup; what every metric function takes.

    ``reason`` is ``None`` when the query can be computed, otherwise a sentence saying
    why every metric on it is NaN.
    """

    query: Query
    targets: tuple[SetLookup, ...]
    attributes: tuple[SetLookup, ...]
    lost_vocabulary_threshold: float
    settings: Mapping[str, Any] = field(default_factory=dict)
    reason: str | None = None

    @property
    def query_name(self) -> str:
        return self.query.query_name

    @property
    def template(self) -> tuple[int, int]:
        return self.query.template

    @property
    def ok(self) -> bool:
        return self.reason is None

    def report(self) -> dict[str, Any]:
        """Found / missing words per set, for the run report."""
        return {
            "query_name": self.query_name,
            "reason": self.reason,
            "lost_vocabulary_threshold": self.lost_vocabulary_threshold,
            "settings": dict(self.settings),
            "targets": [s.as_dict() for s in self.targets],
            "attributes": [s.as_dict() for s in self.attributes],
        }


def _lookup_set(
    vectors: WordVectors,
    words: tuple[str, ...],
    name: str,
    kind: str,
    preprocessors: Sequence[Mapping[str, Any]],
    strategy: str,
    normalize: bool,
    vocab_prefix: str | None,
) -> SetLookup:
    rows: dict[str, np.ndarray] = {}
    row_of: dict[str, int] = {}
    positions: list[int] = []
    not_found: list[str] = []
    missing: list[str] = []
    for word in words:
        first: str | None = None
        for options in preprocessors:
            key = preprocess_word(word, options, vocab_prefix)
            vec = vectors.get(key)
            if vec is None:
                not_found.append(key)
                continue
            rows[key] = vec  # re-assignment keeps the first-seen position, as a dict does
            row_of.setdefault(key, len(row_of))
            if first is None:
                first = key
            if strategy == "first":
                break
        if first is None:
            missing.append(word)
            positions.append(-1)
        else:
            positions.append(row_of[first])
    found = tuple(rows)
    dim = vectors.dim
    matrix = np.array([rows[k] for k in found], dtype=np.float32).reshape(len(found), dim)
    if normalize:
        # row by row with np.linalg.norm, exactly as WEFE does (same float32 rounding)
        for i in range(len(found)):
            with np.errstate(divide="ignore", invalid="ignore"):
                matrix[i] = matrix[i] / np.linalg.norm(matrix[i])
    matrix.flags.writeable = False
    return SetLookup(
        name, kind, words, found, matrix, tuple(positions), tuple(not_found), tuple(missing)
    )


def _check_threshold(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"lost_vocabulary_threshold must be a number, got {value!r}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"lost_vocabulary_threshold must be in [0, 1], got {value}")
    return value


def lookup_query(
    vectors: WordVectors,
    query: Query,
    *,
    lost_vocabulary_threshold: float = 0.2,
    preprocessors: Iterable[Mapping[str, Any]] = ({},),
    strategy: str = "first",
    normalize: bool = False,
    vocab_prefix: str | None = None,
) -> QueryLookup:
    """Map every set of ``query`` to vectors, WEFE's way; see the module docstring."""
    if not isinstance(query, Query):
        raise TypeError(f"query must be a Query, got {type(query).__name__}")
    threshold = _check_threshold(lost_vocabulary_threshold)
    preprocessors = list(preprocessors)
    if not preprocessors:
        raise ValueError("preprocessors needs at least one dict (use [{}] for none)")
    for i, options in enumerate(preprocessors):
        _check_preprocessor(options, i)
    if strategy not in ("first", "all"):
        raise ValueError(f"strategy must be 'first' or 'all', got {strategy!r}")
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {normalize!r}")

    def run(
        sets: tuple[tuple[str, ...], ...], names: tuple[str, ...], kind: str
    ) -> tuple[SetLookup, ...]:
        return tuple(
            _lookup_set(vectors, s, n, kind, preprocessors, strategy, normalize, vocab_prefix)
            for s, n in zip(sets, names, strict=True)
        )

    targets = run(query.target_sets, query.target_sets_names, "target")
    attributes = run(query.attribute_sets, query.attribute_sets_names, "attribute")
    problems = [
        f"{s.kind} set '{s.name}' lost {len(s.words) - len(s.found)} of {len(s.words)} words "
        f"({s.lost_fraction:.1%}), missing {list(s.missing)}"
        + (" (duplicates collapse and count as lost)" if len(set(s.words)) < len(s.words) else "")
        for s in targets + attributes
        if s.lost_fraction > threshold
    ]
    reason = None
    if problems:
        reason = (
            f"query '{query.query_name}': "
            + "; ".join(problems)
            + f"; more than lost_vocabulary_threshold={threshold}, so every value is NaN"
        )
    settings = {
        "preprocessors": [_describe(p) for p in preprocessors],
        "strategy": strategy,
        "normalize": normalize,
        "vocab_prefix": vocab_prefix,
    }
    return QueryLookup(query, targets, attributes, threshold, settings, reason)


def _describe(options: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(options)
    fn = out.get("preprocessor")
    if fn is not None:
        out["preprocessor"] = getattr(fn, "__qualname__", repr(fn))
    return out


class LookupOptions(BaseModel):
    """WEFE's lookup arguments. Validated once, by running them through ``lookup_query``.

    A preprocessor may hold a callable, which no fingerprint can hash; so nodes never
    see the options themselves, only what they do to the words (:meth:`variants`): the
    key each preprocessor makes of each word. Two configurations that make the same
    keys are the same work, and a changed callable changes the keys, hence the
    fingerprint.
    """

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
        # The lookup owns the rules (unknown keys, strip_accents values, the
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

