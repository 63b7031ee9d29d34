"""``hf:DIR --tokenizer DIR|ID``: a checkpoint whose tokenizer lives elsewhere.

open-unlearning's ``tokenizer_args`` (``pretrained_model_name_or_path``) loads a model's
tokenizer from another folder or hub id, e.g. a fine-tuned checkpoint saved without its
tokenizer files. The tokenizer changes every number, so it is part of the fingerprint:
its files' hashes (a folder) or its id (a hub id). The masking mode is decided from the
tokenizer's own files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..cache.filehash import file_sha256
from .chat_quirks import folder_facts
from .hf import HFModel, _digest, _dedicated_pad_files, _ensure_pad
from .hf_encoder import HFEncoder


class HFModelTokenizer(HFModel):
    """An :class:`HFModel` whose tokenizer is loaded from ``tokenizer`` (a folder or hub id)."""

    def __init__(self, path_or_id: Any, tokenizer: str, **kw: Any):
        super().__init__(path_or_id, **kw)
        self.tokenizer_source = str(tokenizer)
        self._tok_dir = Path(self.tokenizer_source).expanduser()
        if not self._tok_dir.is_dir():
            self._tok_dir = None  # a hub id

    def encoder(self) -> HFEncoder:
        if self._encoder is None:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(self._tok_dir) if self._tok_dir else self.tokenizer_source)
            _ensure_pad(tok)
            self._encoder = HFEncoder(tok)
        return self._encoder

    def chat_facts(self) -> Any:
        return folder_facts(self._tok_dir) if self._tok_dir is not None else None

    def mask_mode_matters(self) -> bool:
        return self._tok_dir is None or not _dedicated_pad_files(self._tok_dir)

    def _compute_fingerprint(self) -> str:
        return _digest("hf-tok-1", super()._compute_fingerprint(), *tokenizer_digest_parts(self.tokenizer_source, self._tok_dir))


def tokenizer_digest_parts(source: str, folder: Path | None) -> list[str]:
    """What a ``--tokenizer`` adds to a fingerprint: its files' hashes (a folder), else its id."""
    if folder is None:
        return [f"tokenizer={source}"]
    return [f"{p.name}={file_sha256(p)}" for p in sorted(folder.iterdir())
            if p.is_file() and (p.name.startswith(("tokenizer", "special_tokens", "chat_template", "vocab",
                                                   "merges", "added_tokens")) or p.suffix == ".model")]
