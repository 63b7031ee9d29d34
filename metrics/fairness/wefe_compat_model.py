"""WEFE's ``WordEmbeddingModel`` and its query -> vectors step, in both of WEFE's spellings.

A metric written for WEFE turns a query into vectors before computing anything. WEFE
moved that call between versions, and user code exists in both forms, so both work:

* the seed's (WEFE 0.x): ``model.get_embeddings_from_query(query=..., lost_vocabulary_threshold=...,
  preprocessor_args=..., secondary_preprocessor_args=..., warn_not_found_words=...)`` -- the
  primary preprocessing, then the secondary one for the words it missed;
* WEFE 1.0.1's: ``get_embeddings_from_query(model, query, lost_vocabulary_threshold=...,
  preprocessors=[...], strategy="first", normalize=False, warn_not_found_words=...)``.

Both are one lookup (``lookup.lookup_query``, the code every built-in fairness metric
uses, so a user's metric sees exactly the vectors WEAT sees): each set is looked up on
its own; a set that loses *more* than ``lost_vocabulary_threshold`` of its words makes
the call return ``None`` (logged, as WEFE does; the metric then returns NaN); otherwise
``(target_sets, attribute_sets)``, each a dict set name -> {word: vector}. Inside a
metric's graph node (``wefe_compat_base``) the reason for a ``None`` is also kept, so
the NaN in the EVAL file says which set lost which words.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .embeddings import WordVectorsResource
from .lookup import LookupOptions, lookup_query
from .query import Query
from .vectors import WordVectors

__all__ = ["WordEmbeddingModel", "as_model", "as_query", "get_embeddings_from_query"]

log = logging.getLogger(__name__)
EmbeddingSets = dict[str, dict[str, np.ndarray]]
_SEED_PREPROCESSOR: Mapping[str, Any] = {"strip_accents": False, "lowercase": False, "preprocessor": None}
# Inside a BaseMetric's node: the reasons of the lookups that returned None (wefe_compat_base reads them).
LOST_REASONS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("wefe_lost_reasons", default=None)


class WordEmbeddingModel:
    """WEFE's model wrapper: ``WordEmbeddingModel(vectors, name=None, vocab_prefix=None)``.

    ``vectors``: a gensim ``KeyedVectors``, a dict word -> vector, a ``WordVectors``,
    or the path of an embeddings file (``.npz`` with arrays ``words`` and ``vectors``,
    word2vec text / GloVe, word2vec binary). ``wv`` is what was given (so gensim
    methods keep working on a KeyedVectors); ``vectors`` is the ``WordVectors`` used.
    """

    def __init__(self, wv: Any, name: str | None = None, vocab_prefix: str | None = None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name should be a string or None, got {type(name)}.")
        if vocab_prefix is not None and not isinstance(vocab_prefix, str):
            raise TypeError(f"vocab_prefix should be a string or None, got {type(vocab_prefix)}.")
        self.resource = WordVectorsResource(wv)
        self.vectors: WordVectors = self.resource.value()
        self.wv = wv
        self.name = "Unnamed model" if name is None else name
        self.vocab_prefix = vocab_prefix

    @property
    def vocab(self) -> Mapping[str, int]:
        return self.vectors.index

    def __len__(self) -> int:
        return len(self.vectors)

    def __contains__(self, key: object) -> bool:
        return key in self.vectors

    def __getitem__(self, key: str) -> np.ndarray:
        if not isinstance(key, str):
            raise TypeError(f"key must be a string, but got {type(key)}.")
        if key not in self.vectors:
            raise KeyError(f"word '{key}' not in model vocab.")
        return self.vectors[key]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WordEmbeddingModel)
            and self.resource.fingerprint() == other.resource.fingerprint()
            and (self.name, self.vocab_prefix) == (other.name, other.vocab_prefix)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable attributes, as WEFE's

    def __repr__(self) -> str:
        prefix = f" and '{self.vocab_prefix}' as word prefix" if self.vocab_prefix else ""
        return (f"<WordEmbeddingModel named '{self.name}' with {len(self.vectors)} word embeddings "
                f"of {self.vectors.dim} dims{prefix}>")

    def get_embeddings_from_query(
        self, query: Any, lost_vocabulary_threshold: float = 0.2,
        preprocessor_args: Mapping[str, Any] = _SEED_PREPROCESSOR,
        secondary_preprocessor_args: Mapping[str, Any] | None = None,
        warn_not_found_words: bool = False,
    ) -> tuple[EmbeddingSets, EmbeddingSets] | None:
        """The seed's spelling (WEFE 0.x): ``preprocessor_args`` first, then
        ``secondary_preprocessor_args`` for the words the first missed."""
        if not isinstance(preprocessor_args, Mapping):
            raise TypeError(f"preprocessor_args should be a dict of preprocessor arguments, got {preprocessor_args}.")
        if not isinstance(secondary_preprocessor_args, (Mapping, type(None))):
            raise TypeError("secondary_preprocessor_args should be a dict of preprocessor arguments or None, "
                            f"got {secondary_preprocessor_args}.")
        preprocessors = [dict(preprocessor_args)]
        if secondary_preprocessor_args is not None:
            preprocessors.append(dict(secondary_preprocessor_args))
        return get_embeddings_from_query(self, query, lost_vocabulary_threshold, preprocessors,
                                         warn_not_found_words=warn_not_found_words)


def as_model(model: Any) -> WordEmbeddingModel:
    if isinstance(model, WordEmbeddingModel):
        return model
    if hasattr(model, "wv") and hasattr(model, "vocab_prefix") and hasattr(model, "name"):
        return WordEmbeddingModel(model.wv, model.name, model.vocab_prefix)  # a wefe.WordEmbeddingModel
    raise TypeError(f"model should be a WordEmbeddingModel instance, got: {type(model)}.")


def as_query(query: Any) -> Query:
    if isinstance(query, Query):
        return query
    names = ("target_sets", "attribute_sets", "target_sets_names", "attribute_sets_names")
    if all(hasattr(query, n) for n in names):  # a wefe.Query
        return Query(*(getattr(query, n) for n in names))
    raise TypeError(f"query should be a Query instance, got: {type(query)}.")


def get_embeddings_from_query(
    model: Any, query: Any, lost_vocabulary_threshold: float = 0.2,
    preprocessors: Sequence[Mapping[str, Any]] = ({},), strategy: str = "first",
    normalize: bool = False, warn_not_found_words: bool = False, verbose: bool = False,
) -> tuple[EmbeddingSets, EmbeddingSets] | None:
    """WEFE 1.0.1's ``wefe.preprocessing.get_embeddings_from_query``: ``None`` when a set lost
    more words than allowed, else ``(target_sets, attribute_sets)`` as set name -> {word: vector}."""
    model, query = as_model(model), as_query(query)
    if isinstance(lost_vocabulary_threshold, bool) or not isinstance(lost_vocabulary_threshold, (int, float)):
        raise TypeError(f"lost_vocabulary_threshold should be a float, got: {type(lost_vocabulary_threshold)}.")
    if not isinstance(warn_not_found_words, bool):
        raise TypeError(f"warn_not_found_words should be a bool, got: {type(warn_not_found_words)}.")
    options = LookupOptions(lost_vocabulary_threshold=float(lost_vocabulary_threshold), preprocessors=list(preprocessors),
                            strategy=strategy, normalize=normalize, vocab_prefix=model.vocab_prefix)
    lk = lookup_query(model.vectors, query, **options.lookup_kwargs())
    if warn_not_found_words:
        for s in lk.targets + lk.attributes:
            if s.not_found:
                log.warning("The following words from set '%s' do not exist within the vocabulary of %s: %s",
                            s.name, model.name, list(s.not_found))
    if verbose:
        log.info("%s", lk.report())
    if not lk.ok:
        log.error("At least one set of '%s' query has proportionally fewer embeddings than allowed by the "
                  "lost_vocabulary_threshold parameter (%s). This query will return np.nan.",
                  query.query_name, lost_vocabulary_threshold)
        reasons = LOST_REASONS.get()
        if reasons is not None:
            reasons.append(str(lk.reason))
        return None
    return _sets(lk.targets), _sets(lk.attributes)


def _sets(sets: Sequence[Any]) -> EmbeddingSets:
    # keyed by set name, as WEFE's dicts (two sets of one name collapse there too); fresh, writable rows
    return {s.name: {w: np.array(v) for w, v in zip(s.found, s.vectors, strict=True)} for s in sets}

