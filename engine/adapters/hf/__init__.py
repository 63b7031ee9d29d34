"""HuggingFace transformers as an evaluation resource: :class:`HFModel`.

* :class:`HFModel` names a checkpoint. Its fingerprint is a content hash of the files, so it
  is known without loading anything, and a warm rerun never imports torch (unless
  ``dtype="auto"`` has to ask torch which device exists; pass a dtype to avoid that).
  ``attention_mask="reference"`` (default) reproduces open-unlearning's ``ids != pad``
  attention mask (with pad == eos it hides real eos tokens); ``"padding"`` masks only padding.
* :class:`HFEncoder` (hf_encoder.py) turns text into request ids exactly the way open-unlearning does
  (``preprocess_chat_instance`` / ``preprocess_pretraining_instance``), quirks included,
  plus a ``joint`` mode that fixes the prompt/answer boundary bug (open-unlearning #195).
* :class:`HFAdapter` (hf_adapter.py) runs one batch of same-kind requests; it is the one class that
  declares this backend's request kinds (``HFAdapter.handlers``: token stats in chunks, generation,
  hidden states, and each plugin's kind). The folder's other modules are named in docs/architecture.md.

torch and transformers are imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from ...backend import Capabilities, Identity, ModelResource
from ...cache.aliases import resolve as resolve_alias  # a folder the Trainer saved: its in-memory fingerprint
from ...cache.filehash import file_sha256
from .hf_adapter import ATTENTION_MASKS, HFAdapter
from .hf_encoder import HFEncoder
from .hf_plan import planned_tokens
from ..integrity import (OTHER_FILES, WEIGHT_SUFFIXES, FolderSnapshot, check_vocab, config_vocab, loaded_rows,  # noqa: F401
                        model_files as _model_files, model_names as _names)
from .hf_pad import dedicated_pad_files as _dedicated_pad_files, dedicated_pad_object as _dedicated_pad_object
from ..placement import check_device_map, placement, placement_kwargs, whole_weights

__all__ = ["HFModel", "HFEncoder", "HFAdapter"]

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DEVICES = ("auto", "cuda", "mps", "cpu")

#: what a model with weights split over ranks serves: kinds whose every forward pass goes
#: through the root module (paired over the ranks by distributed/lockstep.py), none backward
SHARDED_KINDS = frozenset({"token_stats", "generate", "hidden_states"})

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_CLASS: list[type] = []  # hf_peft.HFPeftModel, registered when the adapters package is imported
GGUF_CLASS: list[type] = []  # hf_gguf.HFGGUFModel, registered likewise
DERIVE: list = []  # hf_derived.derive, registered likewise


def is_adapter_dir(path: Any) -> bool:
    """A local folder holding a PEFT adapter (its ``adapter_config.json``), not a full checkpoint."""
    try:
        return (Path(str(path)).expanduser() / ADAPTER_CONFIG).is_file()
    except OSError:
        return False


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# ------------------------------------------------------------------------------ resource

class HFModel(ModelResource):
    """A causal LM checkpoint (local directory or hub id) as an evaluation resource.

    ``dtype="auto"``: fp32 on CPU (bf16 matmuls there are slow and less exact); on an accelerator the
    checkpoint's own ``torch_dtype`` (fp32 if it has none). ``device="auto"``: cuda, then mps, then cpu.

    ``attention_mask``: ``"reference"`` (default) reproduces open-unlearning's collator, ``attention_mask =
    input_ids != pad_token_id``. When the tokenizer has no pad token, pad = eos (open-unlearning's rule, applied
    here too), so every real eos inside a sequence is hidden from attention: each ``<|eot_id|>`` ending a
    Llama-3-Instruct chat turn, and the bos of a tokenizer with bos == eos == pad. This applies to teacher-forced
    scoring (TokenStats), generation and GradNorm. ``"padding"`` masks only padding (the corrected behaviour). With
    a dedicated pad token the two give the same numbers; see :meth:`mask_mode_matters` for how the fingerprint tells
    them apart.
    """

    kind = "model"
    sharded: str | None = None  # "fsdp", "fsdp2", "zero3": an in-memory model split over ranks
    _weights_digest: str | None = None
    planned_tokens = planned_tokens  # --plan-only's token count, shared prefixes included (hf_plan.py)

    def __new__(cls, path_or_id: Any = None, *args: Any, **kwargs: Any) -> "HFModel":
        """``HFModel(ADAPTER_DIR)`` is a PEFT adapter (``adapter_config.json``; hf_peft.py): its
        fingerprint must hold its base model's and its adapter config, which a plain folder
        hash of the adapter's own weights misses (a changed ``lora_alpha`` kept the old one)."""
        if cls is HFModel and ADAPTER_CLASS and path_or_id is not None and is_adapter_dir(path_or_id):
            cls = ADAPTER_CLASS[0]
        elif cls is HFModel and GGUF_CLASS and path_or_id is not None and GGUF_CLASS[0].claims(path_or_id):
            cls = GGUF_CLASS[0]  # ``HFModel(FILE.gguf)``: dequantized by transformers at load (hf_gguf.py)
        return super().__new__(cls)

    def __init__(self, path_or_id: str | os.PathLike, dtype: str = "auto", device: str = "auto",
                 attn_implementation: str | None = None, attention_mask: str = "reference",
                 device_map: str | None = None, max_memory: dict | None = None, offload_folder: str | None = None):
        if dtype not in ("auto", *DTYPES):
            raise ValueError(f"HFModel: dtype must be auto, bf16, fp16 or fp32, not {dtype!r}")
        if device not in DEVICES and not str(device).startswith("cuda:"):
            raise ValueError(f"HFModel: device must be one of {DEVICES} (or cuda:N), not {device!r}")
        _check_mask_mode(attention_mask)
        check_device_map(device_map)
        # placement (placement.py): not part of the fingerprint, the numbers do not depend on it
        self.device_map, self.max_memory, self.offload_folder = device_map, max_memory, offload_folder
        self.attention_mask = attention_mask
        self.path = str(path_or_id)
        self.is_dir = Path(self.path).expanduser().is_dir()
        if not self.is_dir and self.path.startswith(("/", ".", "~")):  # a path, not a hub id
            raise FileNotFoundError(f"HFModel: no checkpoint directory at {self.path}")
        self.dtype, self.device, self.attn_implementation = dtype, device, attn_implementation
        self._objects: tuple[Any, Any] | None = None
        self._fp: str | None = None
        self._snapshot: FolderSnapshot | None = None  # the files the fingerprint hashed (integrity.py)
        self._encoder: HFEncoder | None = None
        self._adapter: HFAdapter | None = None
        self.name = self.path

    @classmethod
    def from_pretrained_objects(cls, model: Any, tokenizer: Any, name: str = "in-memory",
                                attention_mask: str = "reference", sharded: str | None = None,
                                weights_digest: str | None = None) -> "HFModel":
        """Wrap an already-built model and tokenizer (tests, notebooks, a model mid-training).

        The fingerprint hashes the weights and the tokenizer's serialization once, when
        first asked; mutate the model afterwards and the fingerprint is stale, so wrap
        it again. The tokenizer gets pad = eos when it has no pad token.

        ``sharded`` ("fsdp", "fsdp2", "zero3"): the weights are split over the job's ranks
        (``distributed/lockstep.py``); every rank must then run the same graph, the model
        serves only :data:`SHARDED_KINDS`, and ``weights_digest`` (equal on every rank,
        from ``lockstep.weights_digest``) replaces the hash of a state dict no rank holds.
        """
        _check_mask_mode(attention_mask)
        self = cls.__new__(cls)
        self.device_map = self.max_memory = self.offload_folder = None
        self.path, self.is_dir, self.name, self.attention_mask = name, False, name, attention_mask
        self.dtype = str(model.dtype).replace("torch.", "")
        self.device, self.attn_implementation = str(model.device.type), None
        _ensure_pad(tokenizer)
        self._objects, self._fp, self._adapter, self._snapshot = (model, tokenizer), None, None, None
        self._encoder = HFEncoder(tokenizer)
        if sharded and not weights_digest:
            raise ValueError(f"{name}: sharded weights need weights_digest (lockstep.weights_digest)")
        self.sharded, self._weights_digest = sharded, weights_digest
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
        # The mask mode is hashed only where it can change a number (mask_mode_matters),
        # so checkpoints with a dedicated pad token keep one fingerprint (and one cache)
        # for both modes, and for the results cached before the option existed.
        mask = [f"attention_mask={self.attention_mask}"] if self.mask_mode_matters() else []
        if self._objects is not None:
            model, _ = self._objects
            weights = self._weights_digest or _state_dict_digest(model)
            return _digest("hf-mem-1", weights, _config_digest(model),
                           self.encoder().fingerprint(), self.dtype, *mask)
        dtype = self.resolved_dtype()
        if self.is_dir:
            root = Path(self.path).expanduser()
            files = _model_files(root)
            if not any(p.suffix in WEIGHT_SUFFIXES for p in files):
                raise FileNotFoundError(f"HFModel: no model*.safetensors or pytorch_model*.bin weights in {root}")
            self._snapshot = FolderSnapshot.take(root, files, file_sha256)  # stats kept to notice a later change
            hashed = [f"{n}={d}" for n, (_, d) in self._snapshot.files.items()]
            return resolve_alias(_digest("hf-dir-1", *hashed, f"dtype={dtype}", *mask))
        # A hub id: the resolved commit of a locally cached snapshot identifies the weights.
        # Without one (never downloaded, or not resolvable offline) only the id is hashed,
        # which cannot notice the repository changing on the hub.
        snapshot = _hub_snapshot(self.path)
        return _digest("hf-hub-1", self.path, snapshot.name if snapshot else "unresolved", f"dtype={dtype}", *mask)

    def weights_fingerprint(self) -> str | None:
        """The weight files' contents, their names aside (the backend contract); None for a hub id
        or in-memory objects, whose files evaldag does not hash."""
        if self._objects is not None or not self.is_dir:
            return None
        self.fingerprint()
        if self._snapshot is None:
            return None
        return _digest("weights-1", *sorted(d for n, (_, d) in self._snapshot.files.items() if Path(n).suffix in WEIGHT_SUFFIXES))

    def device_type(self) -> str:
        """``cpu``, ``cuda`` or ``mps``: where this model runs, known without importing torch.

        Part of the request store's key, so a CPU answer is never served to a CUDA run. For
        ``device="auto"`` it is what torch would pick, read from torch when it is already
        imported, else from the environment: ``cuda`` when an NVIDIA driver is present, a
        GPU is visible and the installed torch is a CUDA build; ``mps`` on Apple silicon;
        else ``cpu``.
        """
        if self._adapter is not None:
            return str(self._adapter.device).split(":")[0]
        if self.device != "auto":
            return str(self.device).split(":")[0]
        if "torch" in sys.modules:
            return _resolve_device("auto")
        return _probe_device()

    def mask_mode_matters(self) -> bool:
        """Whether ``attention_mask="reference"`` and ``"padding"`` can give different numbers.

        They differ only where a real token equals the pad id. That cannot happen when the
        tokenizer has a dedicated pad token: set explicitly, not the bos, eos or unk, and
        not written by the chat template. Anything else (no pad token, so pad = eos; pad
        equal to bos/eos/unk; a pad the template emits, e.g. ``pad = <|eot_id|>``; special
        tokens that cannot be read from the files; an unresolved hub id) counts as
        "matters", so a wrong answer only costs a cache split, never a shared entry. The
        one case not caught: data that spells the pad token out literally in its text.
        Decided from the tokenizer files alone (no transformers import), or from the
        tokenizer object for :meth:`from_pretrained_objects`.
        """
        if self._objects is not None:
            return not _dedicated_pad_object(self._objects[1])
        root = Path(self.path).expanduser() if self.is_dir else _hub_snapshot(self.path)
        return root is None or not _dedicated_pad_files(root)

    backend = "hf"  # the backend contract (engine/backend.py); label() is "hf:<path>"

    def capabilities(self) -> Capabilities:
        every = HFAdapter.static_capabilities()
        if self.sharded:  # root-module forward passes only, never backward (distributed/lockstep.py)
            return Capabilities(every.kinds & SHARDED_KINDS, every.token_fields)
        return every

    def identity(self) -> Identity:  # the fingerprint holds the files' hashes and the dtype: key fp@device
        return Identity("hf", self.device_type(), in_fingerprint=True)

    def describe(self) -> dict:
        """Where the weights came from and how they ran: path (absolute for a folder), source
        (dir, hub or memory), requested and loaded dtype and device, attention settings."""
        if self._objects is not None:
            source, path = "memory", self.path
        elif self.is_dir:
            source, path = "dir", str(Path(self.path).expanduser().resolve())
        else:
            snapshot = _hub_snapshot(self.path)
            source, path = "hub", self.path + (f"@{snapshot.name}" if snapshot else "")
        out = {"path": path, "source": source, "dtype": self.dtype, "device": self.device,
               "attn_implementation": self.attn_implementation, "attention_mask": self.attention_mask}
        if self._adapter is not None:  # what actually ran
            model = self._adapter.model
            out.update(loaded_dtype=str(model.dtype).replace("torch.", ""), loaded_device=str(model.device))
        if self.device_map is not None:
            out["device_map"] = placement(self._adapter.model) if self._adapter is not None else self.device_map
        return out

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
            _check_rows(self.name, model, tok)
            self._adapter = HFAdapter(model.eval(), tok, attention_mask=self.attention_mask)  # eval mode: no dropout
            if self.sharded:  # every forward through the root module, where lockstep pairs the ranks
                self._adapter.root_forward_only()
            return self._adapter
        tokens = len(self.encoder().tokenizer)
        if self.is_dir:  # before reading any weight: the folder is still the fingerprinted one, its sizes agree
            self.fingerprint()
            self.verify_unchanged()
            check_vocab(self.path, tokens, config_vocab(Path(self.path).expanduser()), "config.json's vocab_size")
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        device = _resolve_device(self.device)
        dtype = getattr(torch, self.resolved_dtype())
        kw: dict[str, Any] = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": dtype}
        if self.attn_implementation:
            kw["attn_implementation"] = self.attn_implementation
        src = str(Path(self.path).expanduser()) if self.is_dir else self.path
        with whole_weights():  # inside a ZeRO-3 training job too (the callback's retain model)
            if self.device_map is not None:  # split over devices by accelerate; it places the layers itself
                model = AutoModelForCausalLM.from_pretrained(
                    src, **kw, **placement_kwargs(self.device_map, self.max_memory, self.offload_folder)).eval()
            else:
                model = AutoModelForCausalLM.from_pretrained(src, **kw).to(device).eval()
        if self._snapshot is not None:  # what was read is what was hashed: every file read again in full
            self._snapshot.check_content(_names(self._snapshot.root))
        _check_rows(self.path, model, self.encoder().tokenizer)
        self._adapter = HFAdapter(model, self.encoder().tokenizer, attention_mask=self.attention_mask)
        return self._adapter

    def derive(self, transform: Any, role: str = "model") -> "HFModel":
        """This model as ``transform`` changes it: a lazy model of its own (hf_derived.py, transforms.py)."""
        return DERIVE[0](self, transform, role)

    def verify_unchanged(self) -> None:
        """Raise :class:`ModelChangedError` when a fingerprinted file was written, replaced,
        added or removed since (one ``stat`` per file; the executor calls it before storing
        each batch). Models that are not folders have nothing to check."""
        if self._snapshot is not None:
            self._snapshot.check_stat(_names(self._snapshot.root))


def _check_rows(name: str, model: Any, tokenizer: Any) -> None:
    """Before any forward pass: every token id of the tokenizer has an embedding row and a logit."""
    for where, rows in loaded_rows(model):
        check_vocab(name, len(tokenizer), rows, where)


def _ensure_pad(tokenizer: Any) -> None:
    """open-unlearning's rule: no pad token -> pad = eos."""
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token


def _check_mask_mode(mode: str) -> None:
    if mode not in ATTENTION_MASKS:
        raise ValueError(f"HFModel: attention_mask must be one of {ATTENTION_MASKS}, not {mode!r}")


def _resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _probe_device() -> str:
    """torch's automatic device choice, guessed without importing torch (see HFModel.device_type)."""
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "mps"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return "cpu"
    if not os.path.exists("/proc/driver/nvidia/version"):
        return "cpu"
    try:
        files = metadata.files("torch") or []
    except Exception:  # noqa: BLE001 - torch not installed: nothing can run on cuda
        return "cpu"
    return "cuda" if any("libtorch_cuda" in str(f) or "libc10_cuda" in str(f) for f in files) else "cpu"


def _hub_snapshot(repo_id: str) -> Path | None:
    """The locally cached snapshot folder of a hub id (its name is the commit), or None."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
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
