"""Big-model placement: ``device_map="auto"`` splits a checkpoint over devices with accelerate.

A model larger than one device is loaded with accelerate's big-model inference
(``from_pretrained(device_map=..., max_memory=...)``): layers fill the GPUs in order,
then CPU memory, then an offload folder on disk; hooks move activations between them.
The numbers do not depend on the placement (each layer computes the same thing
wherever it sits), so the model fingerprint leaves it out and a cache written with one
placement serves another. accelerate is an optional extra: ``pip install 'evaldag[big]'``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
import tempfile
from typing import Any, Iterator

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device_map(device_map: str | None) -> None:
    if device_map is not None and device_map not in DEVICE_MAPS:
        raise ValueError(f"HFModel: device_map must be one of {DEVICE_MAPS}, not {device_map!r}")


def parse_max_memory(text: str | None) -> dict[Any, str] | None:
    """``"0=20GiB,1=20GiB,cpu=64GiB"`` -> ``{0: "20GiB", 1: "20GiB", "cpu": "64GiB"}``."""
    if not text:
        return None
    out: dict[Any, str] = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(\d+(?:\.\d+)?\s*[KMGT]?i?B)\s*", part, flags=re.IGNORECASE)
        if not m:
            raise ValueError(f"max_memory (--model-arg max_memory=...) wants DEVICE=SIZE[,DEVICE=SIZE...] "
                             f"(e.g. 0=20GiB,cpu=64GiB), got {part!r}")
        dev = m.group(1)
        out[int(dev) if dev.isdigit() else dev] = m.group(2).replace(" ", "")
    return out


def placement_kwargs(device_map: str, max_memory: dict | None, offload_folder: str | None) -> dict[str, Any]:
    """The ``from_pretrained`` arguments for a split model (accelerate must be installed)."""
    if importlib.util.find_spec("accelerate") is None:  # transformers needs it for device_map
        raise ImportError("device_map needs accelerate: pip install 'evaldag[big]'")
    kw: dict[str, Any] = {"device_map": device_map,
                          "offload_folder": offload_folder or tempfile.mkdtemp(prefix="evaldag-offload-")}
    if max_memory:
        kw["max_memory"] = dict(max_memory)
    return kw


def placement(model: Any) -> dict[str, str]:
    """Where each module went (``hf_device_map``), or {} for a model on one device."""
    return {k: str(v) for k, v in (getattr(model, "hf_device_map", None) or {}).items()}


@contextlib.contextmanager
def whole_weights() -> Iterator[None]:
    """Load a checkpoint whole even inside a DeepSpeed ZeRO-3 training job.

    While a ZeRO-3 Trainer lives, transformers' ``from_pretrained`` partitions every model
    it builds over the job's ranks (``deepspeed.zero.Init``), the retain and reference models
    the callback's evaluation loads too: each rank would then hold a slice of a model the
    executor runs as replicated. The job's DeepSpeed config is set aside for the load and
    put back after it.
    """
    ds = sys.modules.get("transformers.integrations.deepspeed")  # imported only where DeepSpeed is in use
    ref = getattr(ds, "_hf_deepspeed_config_weak_ref", None)
    held = ref() if ref is not None else None
    if held is None:
        yield
        return
    ds.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        ds.set_hf_deepspeed_config(held)
