"""The probes this benchmark knows: CLI name -> GenderBench probe class.

Probe modules are imported when first asked for, so listing names reads no data.
"""

from __future__ import annotations

import importlib
from typing import Any

from ...metrics.probes import Probe

#: CLI name -> (module, class); GenderBench 1.1.0's class names
PROBES: dict[str, tuple[str, str]] = {
    "direct": ("direct", "DirectProbe"),
    "jobs_lum": ("jobs_lum", "JobsLumProbe"),
    "relationship_levy": ("relationship_levy", "RelationshipLevyProbe"),
    "discrimination_tamkin": ("discrimination_tamkin", "DiscriminationTamkinProbe"),
    "bbq": ("bbq", "BbqProbe"),
    "isear": ("isear", "IsearProbe"),
    "inventories": ("inventories", "InventoriesProbe"),
}

#: GenderBench's DefaultHarness settings for these probes (repetitions, sample_k)
HARNESS_DEFAULTS: dict[str, dict[str, Any]] = {
    "direct": {},
    "jobs_lum": {"num_repetitions": 5},
    "relationship_levy": {"sample_k": 3000},
    "discrimination_tamkin": {"num_repetitions": 3},
    "bbq": {},
    "isear": {},
    "inventories": {"num_repetitions": 5},
}


#: probes registered from Python (:func:`register_probe`), CLI name -> class
CUSTOM: dict[str, type[Probe]] = {}


def register_probe(name: str, cls: type[Probe]) -> type[Probe]:
    """Make a Probe subclass available under ``name`` (in ``ProbesConfig.probes``)."""
    if not (isinstance(cls, type) and issubclass(cls, Probe)):
        raise TypeError(f"register_probe: {cls!r} is not a Probe subclass")
    CUSTOM[name] = cls
    return cls


def known() -> list[str]:
    return [*PROBES, *CUSTOM]


def probe_class(name: str) -> type[Probe]:
    if name in CUSTOM:
        return CUSTOM[name]
    if name not in PROBES:
        raise ValueError(f"unknown probe {name!r}; known: {', '.join(known())}")
    module, cls = PROBES[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


def make_probe(name: str, **kwargs: Any) -> Probe:
    return probe_class(name)(**kwargs)
