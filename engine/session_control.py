"""Relearning's control inside one ``--attack`` run: the retain model's own runs.

R = (m_ret,after - m_ret,before) / (m_unl,after - m_unl,before) needs the retain model evaluated
before and after the same relearn. The relearn already derives the retain model (its ``roles``),
so the run that relearned it can evaluate it too: ``--model RETAIN`` with the run's other flags,
written as that run writes itself into ``OUT/control/`` (its relearned runs in
``OUT/control/attacks/<attack>/``), through the same cache. What the retain model computed as the
unlearned run's reference is not computed again (the cache's nodes and answers), and the relearned
retain model is the one the attacked run trained and stored. Its own retain model is itself
(``Benchmark.for_retain_model``), so every metric of the unlearned run has a control value.

A quantization derives the model only: Q compares the model with itself, so it gets no control.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .robustness_report import ATTACKS, CONTROL


@dataclass(frozen=True)
class Control:
    """The control's benchmarks, their configs and its options (``session.RunOptions``: its
    folder ``OUT/control/``, the attacks that derive the retain model, no control of its own)."""

    benches: list
    cfgs: list
    options: Any

    def folders(self) -> tuple[Path, dict[str, Path]]:
        """Its plain run's folder and its attacked runs' folders by attack name (``robustness``'s arguments)."""
        out = Path(self.options.out)
        return out, {t.folder(): out / ATTACKS / t.folder() for t in self.options.attacks}


def control_run(benches: list, cfgs: list, options: Any) -> Control | None:
    """The control of ``options.attacks``, or None: no attack derives the retain model, no
    benchmark's config names one, or ``options.control`` is off."""
    attacks = tuple(t for t in options.attacks if "retain_model" in t.roles)
    if not options.control or not attacks:
        return None
    pairs = [(b, c) for b, c in ((b, b.for_retain_model(cfg)) for b, cfg in zip(benches, cfgs)) if c is not None]
    if not pairs:
        return None
    resources = {k: v for k, v in options.resources.items() if k != "model"}  # a caller's model is not the retain model
    if "retain_model" in resources:
        resources["model"] = resources["retain_model"]
    return Control([b for b, _ in pairs], [c for _, c in pairs],
                   replace(options, out=Path(options.out) / CONTROL, attacks=attacks, control=False, resources=resources,
                           label=f"{options.label or options.out} [control: the retain model]"))


def later_runs(benches: list, cfgs: list, options: Any, ctl: Control | None, attacked: Any) -> list[tuple[list, list, Any]]:
    """The runs after the plain one, in order: the control's plain run (the retain model's
    reference answers are then in the cache), then each attack's run (``attacked(options, t)``:
    its options), each followed by the control's run under it (its relearned weights stored)."""
    runs = [(ctl.benches, ctl.cfgs, replace(ctl.options, attacks=()))] if ctl is not None else []
    for t in options.attacks:
        runs.append((benches, cfgs, attacked(options, t)))
        if ctl is not None and t in ctl.options.attacks:
            runs.append((ctl.benches, ctl.cfgs, attacked(ctl.options, t)))
    return runs
