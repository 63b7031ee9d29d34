"""Big-model placement: ``device_map="auto"`` splits a checkpoint over devices with accelerate.

A model larger than one device is loaded with accelerate's big-model inference
(``from_pretrained(device_map=..., max_memory=...)``): layers fill the GPUs in order,
then CPU memory, then an offload folder on disk; hooks move activations between them.
The numbers do not depend on the placement (each layer computes the same thing
wherever it sits), so the model fingerprint leaves it out and a cache written with one
placement serves another. accelerate is an optional extra: ``pip install 'evaldag[big]'``.
"""

from __future__ import annotations

import importlib.util
import re
import tempfile
from typing import Any

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
            raise ValueError(f"--max-memory wants DEVICE=SIZE[,DEVICE=SIZE...] (e.g. 0=20GiB,cpu=64GiB), got {part!r}")
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
