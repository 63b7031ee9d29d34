"""The ``hf`` scheme's factory: a checkpoint folder, hub id or ``.gguf`` file and its settings.

Every scheme is built by the backend registry (``evaldag.backends``), ``hf`` as any
other, so a benchmark never chooses among the HF resource classes itself. The keyword
parameters of :func:`from_spec` are the settings ``--model-arg [ROLE:]KEY=VALUE`` takes
for an ``hf:`` model (``spec.route``): ``tokenizer`` (open-unlearning's ``tokenizer_args``:
a folder without one), ``adapter_base`` (a PEFT adapter's local base), and the
placement, ``device_map`` / ``max_memory``, which a role may set for itself. ``dtype``,
``device`` and ``attention_mask`` come from the run's flags.
"""

from __future__ import annotations

from typing import Any

from .hf import HFModel, is_adapter_dir
from .hf_gguf import is_gguf
from .hf_peft import HFPeftModel  # noqa: F401 - registers the adapter class HFModel picks
from .hf_tokenizer import HFModelTokenizer
from .placement import parse_max_memory


def from_spec(target: str, tokenizer: str | None = None, adapter_base: str | None = None, dtype: str = "auto",
              device: str = "auto", attention_mask: str = "reference", device_map: str | None = None,
              max_memory: str | dict | None = None) -> HFModel:
    """The lazy resource for ``hf:TARGET``: a GGUF file, a PEFT adapter over its base, a
    checkpoint with another folder's tokenizer, or a plain checkpoint. Nothing loads here."""
    common = dict(dtype=dtype, device=device, attention_mask=attention_mask, device_map=device_map,
                  max_memory=parse_max_memory(max_memory) if isinstance(max_memory, str) else max_memory)
    if is_gguf(target):  # one file, dequantized by transformers at load (hf_gguf.py)
        return HFModel(target, tokenizer=tokenizer, **common)
    if adapter_base or is_adapter_dir(target):  # a PEFT adapter over its base (hf_peft.py)
        return HFModel(target, adapter_base=adapter_base, **common)
    if tokenizer:  # open-unlearning's tokenizer_args: part of the fingerprint
        return HFModelTokenizer(target, tokenizer, **common)
    return HFModel(target, **common)


#: a model transform (``--attack``) may derive a model from this backend's: it hands over its weights
from_spec.derive = HFModel.derive  # type: ignore[attr-defined]
