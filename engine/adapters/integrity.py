"""Is the model that runs the model that was fingerprinted, and can it run at all?

A folder model's fingerprint is a hash of its files, taken before anything is loaded. A
trainer saving into the folder while a run starts would otherwise make the run compute
with new bytes and store the results under the old bytes' fingerprint, where a later run
of the untouched original is served them. So the files are recorded when hashed
(:class:`FolderSnapshot`), hashed again in full once the weights are loaded, and
``stat``-checked (size, mtime, ctime, inode: a write always moves the ctime) before each
batch of results is stored and after the last one. A change is a :class:`ModelChangedError`.

A model whose embedding (or output layer) has fewer rows than its tokenizer has tokens
fails with an ``IndexError`` inside the first forward pass, once per metric; it is
refused before any forward pass (:func:`check_vocab`).

Both are :class:`ModelRefused`: not one metric's failure but the run's, stopped with one
line naming the folder or file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..cache.filehash import hash_file

WEIGHT_SUFFIXES = (".safetensors", ".bin")
# The weight files transformers (and peft, for an adapter) actually read: ``model.safetensors``,
# ``pytorch_model.bin``, their ``-00001-of-00002`` shards, ``adapter_model.*``. A Trainer
# checkpoint also holds ``training_args.bin``, ``optimizer.pt``, ``rng_state.pth``: hashing
# those would give every resumed run a new fingerprint for the same weights.
WEIGHT_FILE = re.compile(r"^(model|pytorch_model|adapter_model)(-\d+-of-\d+)?\.(safetensors|bin)$")
# Everything besides the weights that changes what the model computes or how text is
# tokenized. config.json / generation_config.json are included too: rope settings or a
# repetition penalty change the numbers as surely as the weights do.
OTHER_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
    "tokenizer.model", "spiece.model", "chat_template.jinja", "chat_template.json",
    "model.safetensors.index.json", "pytorch_model.bin.index.json", "adapter_config.json",
)


def model_files(root: Path) -> list[Path]:
    """The files that make up a folder model: weights, config, tokenizer (what the fingerprint hashes).

    Only files that loading reads (:data:`WEIGHT_FILE`, :data:`OTHER_FILES`): a trainer's
    ``training_args.bin`` or optimizer state beside the weights changes nothing computed."""
    return sorted(p for p in root.iterdir() if p.is_file() and (WEIGHT_FILE.match(p.name) or p.name in OTHER_FILES))


def model_names(root: Path) -> set[str]:
    return {p.name for p in model_files(root)}


class ModelRefused(ValueError):
    """A model the run cannot use: the run stops with this one line, nothing from the model is stored."""


class ModelChangedError(ModelRefused):
    """A model file changed between fingerprinting and (or during) its use."""

    def __init__(self, path: str | os.PathLike, what: str):
        self.path = str(path)
        super().__init__(f"{path} changed while the run was using it ({what}); nothing from this model was stored")


def _stat(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


@dataclass(frozen=True)
class FolderSnapshot:
    """The files a folder model's fingerprint hashed: name -> (stat key, sha256)."""

    root: Path
    files: dict[str, tuple[tuple[int, int, int, int], str]]

    @classmethod
    def take(cls, root: Path, files: list[Path], sha256: Callable[[Path], str]) -> "FolderSnapshot":
        """Hash ``files`` (through ``sha256``, the file-hash memo) and keep each one's stat with its hash."""
        hashed = {}
        for p in files:
            before = _stat(p)
            digest = sha256(p)
            if _stat(p) != before:
                raise ModelChangedError(p, "written while it was being fingerprinted")
            hashed[p.name] = (before, digest)
        return cls(root, hashed)

    def _listed(self, names: set[str]) -> None:
        for name in names ^ set(self.files):
            what = "appeared" if name in names else "disappeared"
            raise ModelChangedError(self.root / name, f"the file {what} after the model was fingerprinted")

    def check_stat(self, names: set[str] | None = None) -> None:
        """Cheap (one ``stat`` per file): raise if a hashed file was written, replaced or removed."""
        if names is not None:
            self._listed(names)
        for name, (key, _) in self.files.items():
            try:
                now = _stat(self.root / name)
            except OSError:
                raise ModelChangedError(self.root / name, "the file disappeared") from None
            if now != key:
                raise ModelChangedError(self.root / name, _what(key, now))

    def check_content(self, names: set[str] | None = None) -> None:
        """Full re-read: every file's sha256 must still be the fingerprinted one."""
        if names is not None:
            self._listed(names)
        for name, (key, digest) in self.files.items():
            path = self.root / name
            try:
                now = hash_file(path)
            except OSError:
                raise ModelChangedError(path, "the file disappeared") from None
            if now != digest:
                raise ModelChangedError(path, f"sha256 {now[:12]} where the fingerprint hashed {digest[:12]}")
        self.check_stat()  # and not rewritten (even with equal bytes) since: later checks compare stats


def _what(old: tuple, new: tuple) -> str:
    if old[1] != new[1]:
        return f"size {old[1]} -> {new[1]} bytes"
    if old[0] != new[0]:
        return "replaced by another file"
    return "rewritten: modification or change time moved"


def config_vocab(root: Path) -> int | None:
    """``vocab_size`` of config.json (top level or ``text_config``), None when absent."""
    try:
        cfg = json.loads((root / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    size = cfg.get("vocab_size", (cfg.get("text_config") or {}).get("vocab_size"))
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def check_vocab(name: str, tokens: int, rows: int | None, where: str) -> None:
    """Refuse a model with fewer embedding/output rows than the tokenizer has tokens."""
    if rows is not None and rows < tokens:
        raise ModelRefused(f"model {name}: {where} has {rows} rows but its tokenizer has {tokens} tokens; "
                           f"token ids >= {rows} cannot be embedded (resize the embeddings to the tokenizer)")


def loaded_rows(model: Any) -> list[tuple[str, int]]:
    """(what, rows) of the loaded model's input embedding and output layer."""
    out = []
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is not None and getattr(emb, "weight", None) is not None:
        out.append(("the input embedding", _rows(emb.weight)))
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        out.append(("the output layer (lm_head)", _rows(head.weight)))
    return out


def _rows(weight: Any) -> int:
    """Rows of a weight, also of a ZeRO-3 partitioned one (its own shape is empty: ``ds_shape``)."""
    return int((getattr(weight, "ds_shape", None) or weight.shape)[0])
