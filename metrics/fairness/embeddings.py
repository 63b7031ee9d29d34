"""Loading word embeddings into a ``WordVectors`` (see ``vectors.py``), and the resource.

Loaders cover the formats users have on disk (``.npz`` with ``words``/``vectors``,
word2vec/GloVe text with or without the header line, word2vec binary, any of them
gzipped) and the objects they have in memory (a ``dict`` word -> vector, a gensim
``KeyedVectors`` or anything wrapping one in ``.wv``). gensim is never imported: a
KeyedVectors is recognised by its attributes, so the package works without it.

Malformed input raises ``EmbeddingFormatError`` naming the file and the line (or,
for binary files, the entry number and byte offset).

``WordVectorsResource`` is what a run binds as ``embeddings``. The engine fingerprints
every resource before it decides what to run, so a warm rerun must be able to say
"same embeddings" without reading them. For a file that is a hash of its bytes,
memoised by (path, size, mtime) with the engine's own file-hash index: a 3.6 GB
GoogleNews binary is read once, and every later run pays a ``stat``. For an object in
memory (a ``WordVectors``, a dict, a gensim ``KeyedVectors``) it is the strict content
fingerprint of ``WordVectors``. Either way one changed bit gives a new fingerprint, so
no cached value outlives the vectors it came from. The same vectors as a file and as
an object fingerprint differently (a file's bytes are not its parsed matrix); they
then share nothing in the cache, but are never confused.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ...engine.cache.filehash import active_memo, file_sha256
from .vectors import EmbeddingFormatError, WordVectors

__all__ = [
    "EmbeddingFormatError",
    "WordVectors",
    "WordVectorsResource",
    "as_word_vectors",
    "from_dict",
    "from_keyed_vectors",
    "load_embeddings",
    "load_npz",
    "load_word2vec_binary",
    "load_word2vec_text",
    "save_npz",
]


# -- in-memory sources ----------------------------------------------------------------
def from_dict(mapping: Mapping[str, Any], *, source: str = "<dict>") -> WordVectors:
    """Build from ``{word: vector}``; every vector must have the same length."""
    words = list(mapping)
    if not words:
        raise EmbeddingFormatError(f"{source}: no words")
    rows = []
    dim = None
    for w in words:
        v = np.asarray(mapping[w], dtype=np.float32)
        if v.ndim != 1:
            raise EmbeddingFormatError(
                f"{source}: the vector of {w!r} is not 1-D (shape {v.shape})"
            )
        if dim is None:
            dim = v.shape[0]
        elif v.shape[0] != dim:
            raise EmbeddingFormatError(
                f"{source}: the vector of {w!r} has {v.shape[0]} values, expected {dim}"
            )
        rows.append(v)
    return WordVectors(words, np.stack(rows), source=source)


def from_keyed_vectors(kv: Any, *, source: str | None = None) -> WordVectors:
    """Build from a gensim ``KeyedVectors`` (or an object holding one in ``.wv``).

    Duck-typed on ``index_to_key`` and ``vectors`` (gensim >= 4), so gensim itself is
    not imported here; WEFE's ``WordEmbeddingModel`` and gensim's ``Word2Vec`` are
    unwrapped through their ``.wv``.
    """
    if not hasattr(kv, "index_to_key") and hasattr(kv, "wv"):
        kv = kv.wv
    if not (hasattr(kv, "index_to_key") and hasattr(kv, "vectors")):
        raise TypeError(
            "expected a gensim KeyedVectors (with index_to_key and vectors), "
            f"got {type(kv).__name__}"
        )
    name = source or f"<{type(kv).__name__}>"
    return WordVectors([str(w) for w in kv.index_to_key], np.asarray(kv.vectors), source=name)


def as_word_vectors(obj: Any) -> WordVectors:
    """Accept whatever a user binds as embeddings: a path, a dict, a KeyedVectors."""
    if isinstance(obj, WordVectors):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return load_embeddings(obj)
    if isinstance(obj, Mapping):
        return from_dict(obj)
    return from_keyed_vectors(obj)


# -- files -------------------------------------------------------------------------------
def load_embeddings(path: str | os.PathLike, *, format: str | None = None) -> WordVectors:
    """Load a file, choosing the reader from ``format`` or the file name.

    ``format``: ``"npz"``, ``"text"`` (word2vec text or GloVe) or ``"binary"`` (word2vec
    binary). Without it: ``.npz`` -> npz, ``.bin`` (optionally ``.gz``) -> binary,
    anything else -> text.
    """
    p = Path(path)
    format = format or guess_format(p)
    if format == "npz":
        return load_npz(p)
    if format == "text":
        return load_word2vec_text(p)
    if format == "binary":
        return load_word2vec_binary(p)
    raise ValueError(f"unknown embedding format {format!r} for {p} (npz, text or binary)")


def guess_format(path: str | os.PathLike) -> str:
    """The reader ``load_embeddings`` picks from a file name: npz, binary or text."""
    name = Path(path).name.lower()
    stem = name[:-3] if name.endswith(".gz") else name
    return "npz" if stem.endswith(".npz") else "binary" if stem.endswith(".bin") else "text"


def load_npz(path: str | os.PathLike) -> WordVectors:
    """An ``.npz`` with a 1-D string array ``words`` and a 2-D array ``vectors``."""
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as data:
            missing = [k for k in ("words", "vectors") if k not in data.files]
            if missing:
                raise EmbeddingFormatError(
                    f"{p}: missing array(s) {missing}; found {sorted(data.files)}"
                )
            words = data["words"]
            vectors = data["vectors"]
    except EmbeddingFormatError:
        raise
    except ValueError as exc:  # object arrays need pickle, which we never allow
        raise EmbeddingFormatError(f"{p}: cannot read without pickle ({exc})") from exc
    except OSError as exc:
        raise EmbeddingFormatError(f"{p}: not a readable .npz file ({exc})") from exc
    if words.ndim != 1 or words.dtype.kind not in "U":
        raise EmbeddingFormatError(
            f"{p}: 'words' must be a 1-D unicode string array, "
            f"got {words.dtype} with shape {words.shape}"
        )
    return WordVectors([str(w) for w in words], vectors, source=str(p))


def _open_binary(p: Path) -> BinaryIO:
    if p.name.lower().endswith(".gz"):
        return gzip.open(p, "rb")  # type: ignore[return-value]
    return open(p, "rb")


def _parse_header(line: str) -> tuple[int, int] | None:
    parts = line.split()
    if len(parts) == 2 and all(x.isdigit() for x in parts):
        return int(parts[0]), int(parts[1])
    return None


def load_word2vec_text(path: str | os.PathLike, *, header: bool | None = None) -> WordVectors:
    """word2vec text (``N D`` header line) or GloVe (no header): ``word v1 ... vD``.

    ``header=None`` detects the header: a first line of exactly two integers. The word
    is everything before the last D numbers, so GloVe's few tokens that contain spaces
    still load. Blank lines, a wrong number of values, an unparsable number, invalid
    UTF-8 or a header count that disagrees with the body are errors naming the line.
    """
    p = Path(path)
    words: list[str] = []
    rows: list[np.ndarray] = []
    declared: tuple[int, int] | None = None
    dim: int | None = None
    with _open_binary(p) as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise EmbeddingFormatError(
                    f"{p}:{lineno}: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8 "
                    f"({exc.reason}); save the file as UTF-8"
                ) from None
            line = line.rstrip("\r\n")
            if lineno == 1 and header is not False:
                declared = _parse_header(line)
                if declared is not None:
                    dim = declared[1]
                    if dim < 1:
                        raise EmbeddingFormatError(f"{p}:1: header declares dimension {dim}")
                    continue
                if header is True:
                    raise EmbeddingFormatError(
                        f"{p}:1: expected a header 'COUNT DIM', got {line[:60]!r}"
                    )
            if not line.strip():
                raise EmbeddingFormatError(f"{p}:{lineno}: blank line")
            if dim is None:
                dim = len(line.split()) - 1
                if dim < 1:
                    raise EmbeddingFormatError(f"{p}:{lineno}: a word without a vector")
            parts = line.rstrip().rsplit(None, dim)
            if len(parts) != dim + 1 or not parts[0].strip():
                raise EmbeddingFormatError(
                    f"{p}:{lineno}: expected a word and {dim} numbers, "
                    f"got {len(line.split()) - 1} values"
                )
            try:
                vec = np.array(parts[1:], dtype=np.float32)
            except ValueError:
                bad = next(x for x in parts[1:] if not _is_float(x))
                raise EmbeddingFormatError(f"{p}:{lineno}: {bad!r} is not a number") from None
            words.append(parts[0].strip())
            rows.append(vec)
    if not words:
        raise EmbeddingFormatError(f"{p}: no vectors")
    if declared is not None and declared[0] != len(words):
        raise EmbeddingFormatError(
            f"{p}:1: header declares {declared[0]} vectors, the file has {len(words)}"
        )
    return WordVectors(words, np.stack(rows), source=str(p))


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_word2vec_binary(path: str | os.PathLike) -> WordVectors:
    """word2vec binary: a text header ``N D\\n``, then per word ``word<space>`` + D
    little-endian float32 (optionally followed by a newline)."""
    p = Path(path)
    with _open_binary(p) as fh:
        data = fh.read()
    buf = io.BytesIO(data)
    head = buf.readline()
    try:
        declared = _parse_header(head.decode("utf-8"))
    except UnicodeDecodeError:
        declared = None
    if declared is None:
        raise EmbeddingFormatError(f"{p}:1: expected a header 'COUNT DIM', got {head[:60]!r}")
    count, dim = declared
    nbytes = 4 * dim
    words: list[str] = []
    matrix = np.empty((count, dim), dtype=np.float32)
    pos = buf.tell()
    for i in range(count):
        while pos < len(data) and data[pos : pos + 1] in (b"\n", b"\r"):
            pos += 1
        end = data.find(b" ", pos)
        if end < 0:
            raise EmbeddingFormatError(
                f"{p}: entry {i + 1} of {count} (byte {pos}): truncated, no word found"
            )
        try:
            word = data[pos:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EmbeddingFormatError(
                f"{p}: entry {i + 1} (byte {pos}): invalid UTF-8 in word, "
                f"byte 0x{data[pos + exc.start]:02x} at offset {pos + exc.start} ({exc.reason})"
            ) from None
        if not word:
            raise EmbeddingFormatError(f"{p}: entry {i + 1} (byte {pos}): empty word")
        start = end + 1
        if start + nbytes > len(data):
            raise EmbeddingFormatError(
                f"{p}: entry {i + 1} {word!r} (byte {start}): truncated vector, "
                f"{len(data) - start} of {nbytes} bytes"
            )
        matrix[i] = np.frombuffer(data, dtype="<f4", count=dim, offset=start)
        words.append(word)
        pos = start + nbytes
    rest = data[pos:].strip()
    if rest:
        raise EmbeddingFormatError(
            f"{p}: {len(rest)} bytes after the {count} declared vectors (byte {pos})"
        )
    return WordVectors(words, matrix, source=str(p))


def save_npz(vectors: WordVectors, path: str | os.PathLike) -> None:
    """Write the ``.npz`` layout ``load_npz`` reads (no pickle)."""
    np.savez(Path(path), words=np.array(vectors.words, dtype=str), vectors=vectors.matrix)


# -- the resource ----------------------------------------------------------------------------
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

    def validate(self) -> None:
        """Read and check the vectors once, before any node runs: a malformed file is one
        :class:`EmbeddingFormatError` naming the line, not one failure per node. A cold run
        parses the file anyway (the vectors are kept for the nodes); a file the running
        cache's memo already marked as checked, unchanged since (same stat), is not read
        again, so a warm rerun still pays a ``stat``."""
        if self.path is None:
            self.value()
            return
        memo = active_memo()
        if memo is not None and memo.knows(self.path, "embeddings"):
            return
        self.value()
        if memo is not None:
            memo.mark(self.path, "embeddings")

    def fingerprint(self) -> str:
        if self._fp is None:
            if self.path is None:
                self._fp = self.value().fingerprint()
            else:
                h = hashlib.sha256()
                for part in (_FILE_TAG, file_sha256(self.path), self.format or guess_format(self.path)):
                    h.update(part.encode() + b"\0")
                self._fp = h.hexdigest()
        return self._fp

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": str(self.path) if self.path else type(self.source).__name__}
        if self._vectors is not None:
            out.update(words=len(self._vectors), dim=self._vectors.dim)
        return out

    def __repr__(self) -> str:
        return f"<WordVectorsResource {self.describe()['source']}>"
