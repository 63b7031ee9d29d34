"""``evaldag run tofu``: TOFU (Maini et al. 2024) as open-unlearning evaluates it, as a plugin.

What it shares with MUSE (flags, config, retain logs, plots) is
``benchmarks/unlearning/benchmark.py``; here are TOFU's own flags, splits and graph bands.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...engine import Rows
from ...engine.option_owners import add_shared
from ...engine.render.clusters import Split
from .. import common
from ..unlearning.benchmark import UnlearningBenchmark
from . import spec
from .config import DEFAULT_METRICS, MIA_METRICS, TofuConfig
from .data import load_subset, tofu_splits

#: the resource each TOFU split is bound as
RESOURCE_OF_ROLE = {"forget": "tofu_forget", "holdout": "tofu_holdout", "retain": "tofu_retain", "real_authors": "tofu_ra", "world_facts": "tofu_wf"}


def tofu_resources(cfg: TofuConfig) -> dict[str, Any]:
    """The splits (lazy :class:`Rows`); the retain logs and models are added by the base class."""
    source = cfg.data
    if not source:
        raise ValueError("--tofu-data (or --data) is required: a folder with the TOFU subsets")
    return {RESOURCE_OF_ROLE[role]: Rows(lambda s=subset: load_subset(source, s), f"{source}:{subset}", limit=cfg.limit)
            for role, subset in tofu_splits(cfg.forget_split, cfg.holdout_split).items()}


class TofuBenchmark(UnlearningBenchmark):
    name = "tofu"
    group = spec.GROUP
    spec = spec
    default_metrics, mia_metrics = DEFAULT_METRICS, MIA_METRICS
    description = "TOFU (Maini et al. 2024): forget quality, truth ratio, ROUGE, model utility, privleak, MIAs"
    Config = TofuConfig
    #: the unlearning splits and TOFU's own: the bands of its graph drawing
    splits = (*UnlearningBenchmark.splits,
              Split("ra", "real authors", r"(?:^|[^a-z])ra(?:[^a-z]|$)|real_?authors", rank=40),
              Split("wf", "world facts", r"(?:^|[^a-z])wf(?:[^a-z]|$)|world_?facts", rank=50))

    def add_own_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--tofu-data", default=None, help="TOFU: folder with <subset>.json|jsonl|parquet (or locuslab/TOFU when online)")
        p.add_argument("--forget-split", default="forget10", help="TOFU: forget01, forget05 or forget10")
        p.add_argument("--holdout-split", default=None, help="TOFU: default holdout<NN> matching the forget split")
        p.add_argument("--tofu-retain-logs", default=None, help="TOFU: the retain model's TOFU_EVAL.json")
        add_shared(p, *common.MAX_NEW_TOKENS_FLAG[0], **common.MAX_NEW_TOKENS_FLAG[1])  # probes' too: one meaning

    def own_config(self, args: argparse.Namespace) -> dict[str, Any]:
        return dict(forget_split=args.forget_split, holdout_split=args.holdout_split, **common.new_tokens(args, 200))

    def config_values(self, cfg: TofuConfig) -> dict[str, Any]:
        split = tofu_splits(cfg.forget_split, cfg.holdout_split)
        return {**super().config_values(cfg), "forget_split": cfg.forget_split, "holdout_split": split["holdout"]}

    def data_resources(self, cfg: TofuConfig) -> dict[str, Any]:
        return tofu_resources(cfg)
