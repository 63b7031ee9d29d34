"""HuggingFace transformers as an evaluation resource: :class:`HFModel`.

* :class:`HFModel` names a checkpoint. Its fingerprint is a content hash of the files, so it
  is known without loading anything, and a warm rerun never imports torch (unless
  ``dtype="auto"`` has to ask torch which device exists; pass a dtype to avoid that).
* :class:`HFEncoder` (hf_encoder.py) turns text into request ids exactly the way open-unlearning does
  (``preprocess_chat_instance`` / ``preprocess_pretraining_instance``), quirks included,
  plus a ``joint`` mode that fixes the prompt/answer boundary bug (open-unlearning #195).
* :class:`HFAdapter` (hf_adapter.py) runs one batch of same-kind requests: per-token statistics computed in
  chunks (never a full ``[batch, len, vocab]`` float32 tensor), batched generation with
  per-sequence stop strings and seeds, hidden states, and per-sample gradient norms.

torch and transformers are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

from ..store import _atomic_write, default_cache_dir
from .hf_adapter import HFAdapter
from .hf_encoder import HFEncoder

__all__ = ["HFModel", "HFEncoder", "HFAdapter", "file_sha256"]

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DEVICES = ("auto", "cuda", "mps", "cpu")
WEIGHT_SUFFIXES = (".safetensors", ".bin")
# Everything besides the weights that changes what the model computes or how text is
# tokenized. config.json / generation_config.json are included too: rope settings or a
# repetition penalty change the numbers as surely as the weights do.
OTHER_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
    "tokenizer.model", "spiece.model", "chat_template.jinja", "chat_template.json",
)


# --------------------------------------------------------------------------- file hashes


def _index_path() -> Path:
    return default_cache_dir() / "filehash.json"


def file_sha256(path: str | os.PathLike, memo: bool = True) -> str:
    """sha256 of a file, memoised on disk by (realpath, size, mtime_ns).

    A 16 GB checkpoint is read once; later fingerprints cost a ``stat``. The index is a
    small JSON file written atomically under a file lock; if it cannot be written the
    hash is still returned (the memo is only an optimisation).
    """
    real = os.path.realpath(path)
    st = os.stat(real)
    key = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    index_file = _index_path()
    if memo:
        index = _read_index(index_file)
        rec = index.get(real)
        if rec and rec.get("size") == key["size"] and rec.get("mtime_ns") == key["mtime_ns"]:
            return rec["sha256"]
    h = hashlib.sha256()
    with open(real, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    if memo:
        _remember(index_file, real, {**key, "sha256": digest})
    return digest


def _read_index(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _remember(path: Path, real: str, rec: dict) -> None:
    from filelock import FileLock

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=30):
            index = _read_index(path)
            index[real] = rec
            _atomic_write(path, json.dumps(index, sort_keys=True).encode())
    except Exception as e:  # noqa: BLE001 - a memo that cannot be written is not an error
        warnings.warn(f"file-hash index {path} not updated: {e}", stacklevel=3)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# ------------------------------------------------------------------------------ resource


class HFModel:
    """A causal LM checkpoint (local directory or hub id) as an evaluation resource.

    ``dtype="auto"``: fp32 on CPU (bf16 matmuls there are slow and less exact); on an
    accelerator the checkpoint's own ``torch_dtype`` (fp32 if it has none).
    ``device="auto"``: cuda, then mps, then cpu.
    """

    kind = "model"

    def __init__(self, path_or_id: str | os.PathLike, dtype: str = "auto", device: str = "auto",
                 attn_implementation: str | None = None):
        if dtype not in ("auto", *DTYPES):
            raise ValueError(f"HFModel: dtype must be auto, bf16, fp16 or fp32, not {dtype!r}")
        if device not in DEVICES and not str(device).startswith("cuda:"):
            raise ValueError(f"HFModel: device must be one of {DEVICES} (or cuda:N), not {device!r}")
        self.path = str(path_or_id)
        self.is_dir = Path(self.path).expanduser().is_dir()
        if not self.is_dir and self.path.startswith(("/", ".", "~")):  # a path, not a hub id
            raise FileNotFoundError(f"HFModel: no checkpoint directory at {self.path}")
        self.dtype, self.device, self.attn_implementation = dtype, device, attn_implementation
        self._objects: tuple[Any, Any] | None = None
        self._fp: str | None = None
        self._encoder: HFEncoder | None = None
        self._adapter: HFAdapter | None = None
        self.name = self.path

    @classmethod
    def from_pretrained_objects(cls, model: Any, tokenizer: Any, name: str = "in-memory") -> "HFModel":
        """Wrap an already-built model and tokenizer (tests, notebooks, a model mid-training).

        The fingerprint hashes the weights and the tokenizer's serialization once, when
        first asked; mutate the model afterwards and the fingerprint is stale, so wrap
        it again.
        """
        self = cls.__new__(cls)
        self.path, self.is_dir, self.name = name, False, name
        self.dtype = str(model.dtype).replace("torch.", "")
        self.device, self.attn_implementation = str(model.device.type), None
        _ensure_pad(tokenizer)
        self._objects, self._fp, self._adapter = (model, tokenizer), None, None
        self._encoder = HFEncoder(tokenizer)
        return self

    # -- identity
    def resolved_dtype(self) -> str:
        """The torch dtype name the weights are (or will be) loaded in."""
        if self.dtype != "auto":
            return DTYPES.get(self.dtype, self.dtype)
        stored = "float32"
        if self.is_dir:
            try:
                cfg = json.loads((Path(self.path).expanduser() / "config.json").read_text())
                stored = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32")
            except (OSError, ValueError):
                pass
        if stored == "float32":
            return stored
        return "float32" if _resolve_device(self.device) == "cpu" else stored

    def fingerprint(self) -> str:
        if self._fp is None:
            self._fp = self._compute_fingerprint()
        return self._fp

    def _compute_fingerprint(self) -> str:
        if self._objects is not None:
            model, _ = self._objects
            return _digest("hf-mem-1", _state_dict_digest(model), _config_digest(model),
                           self.encoder().fingerprint(), self.dtype)
        dtype = self.resolved_dtype()
        if self.is_dir:
            root = Path(self.path).expanduser()
            files = sorted(p for p in root.iterdir()
                           if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name in OTHER_FILES))
            if not any(p.suffix in WEIGHT_SUFFIXES for p in files):
                raise FileNotFoundError(f"HFModel: no *.safetensors or *.bin weights in {root}")
            return _digest("hf-dir-1", *(f"{p.name}={file_sha256(p)}" for p in files), f"dtype={dtype}")
        # A hub id: the resolved commit of a locally cached snapshot identifies the weights.
        # Without one (never downloaded, or not resolvable offline) only the id is hashed,
        # which cannot notice the repository changing on the hub.
        return _digest("hf-hub-1", self.path, _hub_revision(self.path) or "unresolved", f"dtype={dtype}")

    def describe(self) -> dict:
        device = self._adapter.device if self._adapter is not None else self.device
        return {"path": self.path, "dtype": self.dtype, "device": device,
                "attn_implementation": self.attn_implementation}

    # -- halves
    def encoder(self) -> "HFEncoder":
        if self._encoder is None:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(Path(self.path).expanduser()) if self.is_dir else self.path)
            _ensure_pad(tok)
            self._encoder = HFEncoder(tok)
        return self._encoder

    def load(self) -> HFAdapter:
        if self._adapter is not None:
            return self._adapter
        if self._objects is not None:
            model, tok = self._objects
            self._adapter = HFAdapter(model.eval(), tok)  # evaluation runs in eval mode (no dropout)
            return self._adapter
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        device = _resolve_device(self.device)
        dtype = getattr(torch, self.resolved_dtype())
        kw: dict[str, Any] = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": dtype}
        if self.attn_implementation:
            kw["attn_implementation"] = self.attn_implementation
        src = str(Path(self.path).expanduser()) if self.is_dir else self.path
        model = AutoModelForCausalLM.from_pretrained(src, **kw).to(device).eval()
        self._adapter = HFAdapter(model, self.encoder().tokenizer)
        return self._adapter


def _ensure_pad(tokenizer: Any) -> None:
    """open-unlearning's rule: no pad token -> pad = eos."""
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token


def _resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _hub_revision(repo_id: str) -> str | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True)).name
    except Exception:  # noqa: BLE001 - not cached / hub lib missing: fall back to the id
        return None


def _state_dict_digest(model: Any) -> str:
    import torch

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def _config_digest(model: Any) -> str:
    cfg = {k: v for k, v in model.config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    return _digest(json.dumps(cfg, sort_keys=True, default=str))
