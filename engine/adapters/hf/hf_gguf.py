"""A GGUF checkpoint (llama.cpp's one-file format) as an ``hf:`` model: :class:`HFGGUFModel`.

``--model FILE.gguf`` (or a folder holding one ``.gguf`` and no ``config.json``) loads
through transformers' own GGUF loader, ``from_pretrained(DIR, gguf_file=NAME)``, which
*dequantizes* every tensor to float32: the numbers are those of transformers' fp32
forward on the dequantized weights, not of llama.cpp's quantized arithmetic
(docs/gotchas.md). The quantization type is recorded in ``run.json`` (:meth:`describe`).

* Fingerprint: the file's sha256 through the cache's file-hash memo (nothing loaded), the
  dtype, and the ``--tokenizer`` files when one is given. The file is checked again at
  load and before each stored batch, as a folder's files are (``integrity.py``).
* Tokenizer and chat template: the GGUF's own (its ``tokenizer.*`` metadata) unless
  ``--tokenizer`` names another.
* Before anything loads (:func:`check_gguf`): the header is read (``gguf``'s reader maps
  the file; no tensor is dequantized) and an architecture transformers cannot build, or a
  tensor type ``gguf`` cannot dequantize, is one line naming the file and what is supported.

``gguf`` and ``accelerate`` are the optional ``evaldag[gguf]`` extra; torch, transformers
and gguf are imported inside functions only.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ...cache.filehash import file_sha256
from ..chat_quirks import facts, folder_facts, vocab_counter
from . import DTYPES, GGUF_CLASS, HFModel, _check_rows, _digest, _ensure_pad, _resolve_device
from .hf_adapter import HFAdapter
from .hf_encoder import HFEncoder
from .hf_pad import dedicated_pad_files
from .hf_tokenizer import tokenizer_digest_parts
from ..integrity import FolderSnapshot, ModelRefused, check_vocab

SUFFIX = ".gguf"
EXTRA = "pip install 'evaldag[gguf]'"
SCORED_AS = "transformers' float32 dequantization (not llama.cpp's quantized arithmetic)"


class GGUFError(ModelRefused):
    """A GGUF file that cannot be used as given: one line for ``evaldag: error:``."""


def gguf_candidates(path: Any) -> list[Path]:
    """The GGUF files ``path`` names: itself (a ``.gguf`` file), or the ``.gguf`` files of a
    folder that is not a transformers checkpoint (no ``config.json``); else none."""
    try:
        p = Path(str(path)).expanduser()
        if p.suffix.lower() == SUFFIX and p.is_file():
            return [p]
        if p.is_dir() and not (p / "config.json").is_file():
            return sorted(q for q in p.iterdir() if q.suffix.lower() == SUFFIX and q.is_file())
    except OSError:
        pass
    return []


def is_gguf(path: Any) -> bool:
    """Whether ``path`` is one GGUF checkpoint (a folder with several is refused by :func:`gguf_path`)."""
    return bool(gguf_candidates(path))


def gguf_path(path: Any, flag: str = "--model") -> Path:
    """The one GGUF file ``path`` names, or a :class:`GGUFError` naming the candidates."""
    found = gguf_candidates(path)
    if len(found) != 1:
        names = ", ".join(p.name for p in found) or "none"
        raise GGUFError(f"{flag} {path}: {len(found)} .gguf files there ({names}); name one: {flag} {path}/NAME.gguf")
    return found[0]


def check_extra(path: Any, flag: str = "--model") -> None:
    """``gguf`` and ``accelerate`` (the ``evaldag[gguf]`` extra) are installed, or one line naming it."""
    missing = [m for m in ("gguf", "accelerate") if not _installed(m)]
    if missing:
        raise GGUFError(f"{flag} {path}: a GGUF checkpoint needs {' and '.join(missing)} (the evaldag[gguf] extra): {EXTRA}")


def _installed(module: str) -> bool:
    """Importable, found without importing it (``accelerate`` imports torch); ``sys.modules[name] = None``
    (Python's way of blocking an import) counts as missing."""
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


@dataclass(frozen=True)
class GGUFHeader:
    """What the file's header says (metadata and tensor infos; no tensor data read)."""

    path: Path
    architecture: str
    file_type: str | None  # general.file_type as llama.cpp names it, e.g. Q4_1 (MOSTLY_ prefix dropped)
    tensor_types: dict[str, int]  # ggml type name -> tensor count
    vocab: int | None
    special: dict[str, int | None] = field(default_factory=dict)  # bos/eos/pad/unk ids
    special_text: dict[str, str | None] = field(default_factory=dict)
    chat_template: str | None = None
    tokens: tuple[str, ...] = ()  # the vocabulary, for counting a chat template's tokens (chat_quirks.py)
    token_types: tuple[int, ...] = ()
    tokenizer_model: str | None = None  # "gpt2" (byte-level BPE), "llama" (SentencePiece) ...

    @classmethod
    def read(cls, path: Path) -> "GGUFHeader":
        from gguf import GGUFReader, LlamaFileType

        try:
            r = GGUFReader(str(path))
        except Exception as e:  # noqa: BLE001 - a truncated or foreign file: one line
            raise GGUFError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None

        def value(key: str) -> Any:
            f = r.fields.get(key)
            return None if f is None else f.contents()

        ftype = value("general.file_type")
        try:
            ftype = LlamaFileType(int(ftype)).name.removeprefix("MOSTLY_") if ftype is not None else None
        except ValueError:
            ftype = f"file_type {ftype}"
        tokens = r.fields.get("tokenizer.ggml.tokens")
        special = {k: value(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "padding", "unknown")}
        special = {"bos": special["bos"], "eos": special["eos"], "pad": special["padding"], "unk": special["unknown"]}
        text = {k: (tokens.contents(int(i)) if tokens is not None and i is not None and 0 <= int(i) < len(tokens.data)
                    else None) for k, i in special.items()}
        return cls(path=path, architecture=str(value("general.architecture")), file_type=ftype,
                   tensor_types=dict(Counter(t.tensor_type.name for t in r.tensors)),
                   vocab=len(tokens.data) if tokens is not None else None, special=special, special_text=text,
                   chat_template=value("tokenizer.chat_template"),
                   tokens=tuple(tokens.contents()) if tokens is not None else (),
                   token_types=tuple(int(t) for t in value("tokenizer.ggml.token_type") or ()),
                   tokenizer_model=value("tokenizer.ggml.model"))

    def quantization(self) -> dict[str, Any]:
        """For run.json: the file type, each tensor type's count, and how the numbers were computed."""
        return {"file": self.path.name, "architecture": self.architecture, "file_type": self.file_type,
                "tensor_types": dict(sorted(self.tensor_types.items())), "scored_as": SCORED_AS}

    def chat_facts(self) -> Any:
        """The chat template's default system prompt and answer tail (``chat_quirks.ChatFacts``)."""
        names = {"bos": "bos_token", "eos": "eos_token", "pad": "pad_token", "unk": "unk_token"}
        specials = {names[k]: v for k, v in self.special_text.items() if k in names}
        count = vocab_counter(list(self.tokens), list(self.token_types), self.tokenizer_model == "gpt2") if self.tokens else None
        return facts(self.chat_template, specials, count)

    def bos_is_eos_without_pad(self) -> bool:
        """The shape docs/gotchas.md warns about (pad = eos then hides the real bos/eos tokens)."""
        return self.special.get("pad") is None and self.special.get("bos") == self.special.get("eos")

    def template_pad(self) -> str | None:
        """The pad token (the eos when there is none) when the chat template writes it, else None."""
        pad = self.special_text.get("pad") or self.special_text.get("eos")
        return pad if pad and pad in (self.chat_template or "") else None

    def dedicated_pad(self) -> bool:
        """A pad token of its own (not bos/eos/unk, not written by the chat template)."""
        pad = self.special.get("pad")
        if pad is None or pad in {self.special.get(k) for k in ("bos", "eos", "unk")}:
            return False
        return str(self.special_text.get("pad")) not in (self.chat_template or "")


@functools.lru_cache(maxsize=8)
def _header(path: str, *stat_key: int) -> GGUFHeader:
    """The header of one file version (its stat in the key): the model check, the resource and
    run.json's record read the 49k-token vocabulary's metadata once per process."""
    return GGUFHeader.read(Path(path))


def supported_architectures() -> list[str]:
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING  # no torch import

    return sorted(k for k in GGUF_CONFIG_MAPPING if k not in ("general", "tokenizer"))


def dequantizable_types() -> set[str]:
    """The ggml tensor types ``gguf`` (what transformers calls) can dequantize."""
    from gguf import quants

    return {"F32", "F16"} | {t.name for t in getattr(quants, "_type_traits", {})}


def _transformers_name(arch: str) -> str:
    """llama.cpp's architecture name as transformers' GGUF loader renames it (its load_gguf_checkpoint)."""
    renamed = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2",
               "t5encoder": "t5"}
    return renamed.get(arch, arch)


def check_gguf(path: Any, flag: str = "--model") -> GGUFHeader:
    """Before any weight loads: the extra is there, the file is one GGUF, transformers can build
    its architecture and gguf can dequantize every tensor type in it. Returns its header."""
    check_extra(path, flag)
    file = gguf_path(path, flag)
    st = file.stat()
    header = _header(str(file), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    archs = supported_architectures()
    arch = header.architecture
    if _transformers_name(arch) not in archs:
        raise GGUFError(f"{flag} {file}: architecture {arch!r}: transformers cannot load it from a GGUF "
                        f"(it dequantizes {', '.join(archs)}); convert it to a transformers checkpoint folder")
    bad = sorted(set(header.tensor_types) - dequantizable_types())
    if bad:
        raise GGUFError(f"{flag} {file}: tensor type {', '.join(bad)} (file type {header.file_type}): gguf cannot "
                        f"dequantize it for transformers (it dequantizes {', '.join(sorted(dequantizable_types()))})")
    return header


class HFGGUFModel(HFModel):
    """An :class:`HFModel` read from a GGUF file, dequantized to float32 by transformers at load.

    ``tokenizer``: a folder or hub id whose tokenizer replaces the GGUF's own (``--tokenizer``).
    """

    claims = staticmethod(is_gguf)  # ``HFModel(path)`` is one of these when this says so

    def __init__(self, path_or_id: Any, dtype: str = "auto", device: str = "auto", attn_implementation: str | None = None,
                 attention_mask: str = "reference", device_map: str | None = None, max_memory: dict | None = None,
                 offload_folder: str | None = None, tokenizer: str | None = None):
        self.file = gguf_path(path_or_id)
        super().__init__(self.file.parent, dtype=dtype, device=device, attn_implementation=attn_implementation,
                         attention_mask=attention_mask, device_map=device_map, max_memory=max_memory,
                         offload_folder=offload_folder)
        self.path = self.name = str(self.file)
        self.is_dir = False  # one file: the folder readers (hf_weights, integrity) take the loaded model instead
        self.tokenizer_source = str(tokenizer) if tokenizer else None
        tok_dir = Path(self.tokenizer_source).expanduser() if self.tokenizer_source else None
        self._tok_dir = tok_dir if tok_dir is not None and tok_dir.is_dir() else None
        self._header: GGUFHeader | None = None

    def header(self) -> GGUFHeader:
        if self._header is None:
            self._header = check_gguf(self.file)
        return self._header

    def resolved_dtype(self) -> str:
        return DTYPES.get(self.dtype, "float32")  # "auto": the dequantized float32

    def _compute_fingerprint(self) -> str:
        mask = [f"attention_mask={self.attention_mask}"] if self.mask_mode_matters() else []
        self._snapshot = FolderSnapshot.take(self.file.parent, [self.file], file_sha256)
        _, digest = self._snapshot.files[self.file.name]
        tok = tokenizer_digest_parts(self.tokenizer_source, self._tok_dir) if self.tokenizer_source else []
        return _digest("hf-gguf-1", f"{self.file.name}={digest}", f"dtype={self.resolved_dtype()}", *mask, *tok)

    def mask_mode_matters(self) -> bool:
        if self.tokenizer_source:
            return self._tok_dir is None or not dedicated_pad_files(self._tok_dir)
        return not self.header().dedicated_pad()

    def verify_unchanged(self) -> None:
        if self._snapshot is not None:
            self._snapshot.check_stat()

    def describe(self) -> dict:
        out = {"path": str(self.file.resolve()), "source": "gguf", "dtype": self.dtype, "device": self.device,
               "attn_implementation": self.attn_implementation, "attention_mask": self.attention_mask,
               "gguf": self.header().quantization()}
        if self.tokenizer_source:
            out["tokenizer"] = self.tokenizer_source
        if self._adapter is not None:
            model = self._adapter.model
            out.update(loaded_dtype=str(model.dtype).replace("torch.", ""), loaded_device=str(model.device))
        return out

    def chat_facts(self) -> Any:
        if self.tokenizer_source:
            return folder_facts(self._tok_dir) if self._tok_dir is not None else None
        return self.header().chat_facts()

    def _config(self) -> Any:
        from transformers import AutoConfig

        self.header()  # the extra and the file's types, before transformers reads it
        return AutoConfig.from_pretrained(str(self.file.parent), gguf_file=self.file.name)

    def encoder(self) -> HFEncoder:
        if self._encoder is None:
            from transformers import AutoTokenizer

            if self.tokenizer_source:
                tok = AutoTokenizer.from_pretrained(str(self._tok_dir) if self._tok_dir else self.tokenizer_source)
            else:
                self.header()  # the extra and the file's types, before transformers reads it
                tok = AutoTokenizer.from_pretrained(str(self.file.parent), gguf_file=self.file.name)
            _ensure_pad(tok)
            self._encoder = HFEncoder(tok)
        return self._encoder

    def load(self) -> HFAdapter:
        if self._adapter is not None:
            return self._adapter
        header = self.header()
        tokens = len(self.encoder().tokenizer)
        self.fingerprint()
        self.verify_unchanged()
        check_vocab(self.path, tokens, header.vocab, "the GGUF's vocabulary")
        import torch
        from transformers import AutoModelForCausalLM

        kw: dict[str, Any] = {"dtype": getattr(torch, self.resolved_dtype())}
        if self.attn_implementation:
            kw["attn_implementation"] = self.attn_implementation
        with _quiet_dequantization():
            model = AutoModelForCausalLM.from_pretrained(str(self.file.parent), gguf_file=self.file.name, **kw)
        model = model.to(_resolve_device(self.device)).eval()
        self._snapshot.check_content()  # what was read is what was hashed
        _check_rows(self.path, model, self.encoder().tokenizer)
        self._adapter = HFAdapter(model, self.encoder().tokenizer, attention_mask=self.attention_mask)
        return self._adapter


@contextlib.contextmanager
def _quiet_dequantization() -> Iterator[None]:
    """transformers' GGUF loader draws its own tqdm bar, deaf to ``HF_HUB_DISABLE_PROGRESS_BARS``
    and to transformers' ``disable_progress_bar``: silenced here when either says no bars."""
    from transformers import modeling_gguf_pytorch_utils as loader
    from transformers.utils import logging as hf_logging

    quiet = not hf_logging.is_progress_bar_enabled() or os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").lower() \
        in ("1", "true", "yes")
    bar = getattr(loader, "tqdm", None)
    if not quiet or bar is None:
        yield
        return
    loader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        loader.tqdm = bar


def as_checkpoint(model: Any) -> Any:
    """A GGUF-loaded model rebuilt as a plain one (same class, config without its
    ``quantization_config``, same tensors), which ``save_pretrained`` accepts: transformers
    refuses to save a model it loaded from a GGUF."""
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(model)(config)
    plain.load_state_dict(model.state_dict())
    return plain.to(model.dtype).eval()


GGUF_CLASS.append(HFGGUFModel)
