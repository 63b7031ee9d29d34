"""Word embeddings as an engine resource: a fingerprint now, the vectors only when needed.

The engine fingerprints every resource before it decides what to run, so a warm rerun
must be able to say "same embeddings" without reading them. For a file that is a hash
of its bytes, memoised by (path, size, mtime) with the engine's own file-hash index: a
3.6 GB GoogleNews binary is read once, and every later run pays a ``stat``. For an
object in memory (a ``WordVectors``, a dict, a gensim ``KeyedVectors``) it is the
strict content fingerprint of ``WordVectors``. Either way one changed bit gives a new
fingerprint, so no cached value outlives the vectors it came from.

The same vectors as a file and as an object fingerprint differently (a file's bytes
are not its parsed matrix); they then share nothing in the cache, but are never
confused.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ...engine.cache.filehash import file_sha256
from .embeddings import as_word_vectors, load_embeddings
from .word_vectors import WordVectors

__all__ = ["WordVectorsResource"]

_FILE_TAG = "evaldag.WordVectorsFile.v1"


class WordVectorsResource:
    """Bind as ``embeddings``: ``run(nodes, {"embeddings": WordVectorsResource(path)})``.

    ``source`` is a path (``.npz``, word2vec text / GloVe, word2vec binary, gzipped or
    not; ``format`` overrides the guess from the name) or anything ``as_word_vectors``
    takes. Plain objects can be bound directly too: the WEAT benchmark wraps them.
    """

    kind = "data"  # a changed file is reported as a data change by run.json

    def __init__(self, source: Any, *, format: str | None = None):
        if isinstance(source, WordVectorsResource):
            source, format = source.source, source.format
        self.source = source
        self.format = format
        self.path: Path | None = Path(source) if isinstance(source, (str, os.PathLike)) else None
        if self.path is not None and not self.path.is_file():
            raise FileNotFoundError(f"word embeddings file not found: {self.path}")
        self._vectors: WordVectors | None = None
        self._fp: str | None = None

    def value(self) -> WordVectors:
        if self._vectors is None:
            if self.path is not None:
                self._vectors = load_embeddings(self.path, format=self.format)
            else:
                self._vectors = as_word_vectors(self.source)
        return self._vectors

    def fingerprint(self) -> str:
        if self._fp is None:
            if self.path is None:
                self._fp = self.value().fingerprint()
            else:
                h = hashlib.sha256()
                for part in (_FILE_TAG, file_sha256(self.path), self.format or self._guessed_format()):
                    h.update(part.encode() + b"\0")
                self._fp = h.hexdigest()
        return self._fp

    def _guessed_format(self) -> str:
        # the reader load_embeddings would choose; part of the identity (text vs binary)
        name = self.path.name.lower() if self.path else ""
        stem = name[:-3] if name.endswith(".gz") else name
        return "npz" if stem.endswith(".npz") else "binary" if stem.endswith(".bin") else "text"

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": str(self.path) if self.path else type(self.source).__name__}
        if self._vectors is not None:
            out.update(words=len(self._vectors), dim=self._vectors.dim)
        return out

    def __repr__(self) -> str:
        return f"<WordVectorsResource {self.describe()['source']}>"
