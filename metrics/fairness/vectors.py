"""``WordVectors``: words, a read-only float32 matrix, an index, and a strict fingerprint.

Every WEFE metric only ever asks two things of a model: "is this word in it?" and
"what is its vector?". So the engine keeps this one small value type instead of a
gensim dependency. float32 because WEFE's test model and the GoogleNews vectors are
float32 and WEFE computes its cosines in the input dtype: fidelity needs float32 too.
Loaders (files, dicts, gensim objects) and the ``embeddings`` resource live in
``embeddings.py``.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["EmbeddingFormatError", "WordVectors"]

_FINGERPRINT_TAG = b"evaldag.WordVectors.v1"


class EmbeddingFormatError(ValueError):
    """An embedding file or object that cannot be read; the message says where."""


class WordVectors:
    """Words, their float32 vectors, and a word -> row index. Immutable.

    The matrix is copied once on construction and made read-only, so the fingerprint
    computed for the cache can never go stale. Duplicate words keep their first row
    (gensim does the same when it reads a file with duplicates) and are counted in
    ``duplicates``.
    """

    __slots__ = ("_fingerprint", "_index", "_matrix", "_words", "duplicates", "source")

    def __init__(self, words: Iterable[str], vectors: Any, *, source: str = "<memory>"):
        words = list(words)
        matrix = np.array(vectors, dtype=np.float32, order="C", copy=True)
        if matrix.ndim != 2:
            raise EmbeddingFormatError(
                f"{source}: vectors must be a 2-D array (words x dims), got shape {matrix.shape}"
            )
        if matrix.shape[0] != len(words):
            raise EmbeddingFormatError(
                f"{source}: {len(words)} words but {matrix.shape[0]} vectors"
            )
        for i, w in enumerate(words):
            if not isinstance(w, str):
                raise EmbeddingFormatError(
                    f"{source}: word #{i} is {type(w).__name__} {w!r}, not a str"
                )
        bad = ~np.isfinite(matrix).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise EmbeddingFormatError(
                f"{source}: the vector of {words[i]!r} (row {i}) has NaN or infinite values"
            )
        index: dict[str, int] = {}
        keep: list[int] = []
        repeated: dict[str, None] = {}
        for i, w in enumerate(words):
            if w not in index:
                index[w] = len(keep)
                keep.append(i)
            else:
                repeated[w] = None
        self.duplicates = len(words) - len(keep)
        if self.duplicates:
            names = list(repeated)
            shown = ", ".join(map(repr, names[:10])) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            warnings.warn(
                f"{source}: {self.duplicates} duplicate word(s) ({shown}); the first vector of each is kept",
                stacklevel=2,
            )
            matrix = matrix[keep]
            words = [words[i] for i in keep]
        matrix.flags.writeable = False
        self._words = tuple(words)
        self._matrix = matrix
        self._index = index
        self._fingerprint: str | None = None
        self.source = source

    # -- mapping-like access -------------------------------------------------------
    @property
    def words(self) -> tuple[str, ...]:
        return self._words

    @property
    def matrix(self) -> np.ndarray:
        """The (n_words, dim) float32 matrix, read-only."""
        return self._matrix

    @property
    def index(self) -> Mapping[str, int]:
        return self._index

    @property
    def dim(self) -> int:
        return int(self._matrix.shape[1])

    def __len__(self) -> int:
        return len(self._words)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    def __getitem__(self, word: str) -> np.ndarray:
        try:
            return self._matrix[self._index[word]]
        except KeyError:
            raise KeyError(f"word {word!r} is not in {self.source}") from None

    def get(self, word: str, default: Any = None) -> Any:
        i = self._index.get(word)
        return default if i is None else self._matrix[i]

    def __repr__(self) -> str:
        return f"<WordVectors {len(self)} x {self.dim} float32 from {self.source}>"

    # -- identity --------------------------------------------------------------------
    def fingerprint(self) -> str:
        """sha256 over dtype | shape | matrix bytes | the word list (JSON).

        Strict on purpose: one changed bit in one vector, a reordered vocabulary or a
        renamed word gives a new fingerprint, so cached metric values never outlive the
        embeddings they were computed from. The word list is JSON-encoded so that no
        choice of separator can make two different lists hash alike.
        """
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(_FINGERPRINT_TAG + b"|")
            h.update(f"{self._matrix.dtype.str}|{self._matrix.shape}|".encode())
            h.update(self._matrix.tobytes(order="C"))
            h.update(b"|")
            h.update(json.dumps(self._words, ensure_ascii=False).encode("utf-8"))
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    __fingerprint__ = fingerprint  # so a bare WordVectors can be bound and hashed as a value