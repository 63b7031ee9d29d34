"""``evaldag run muse``: MUSE (Shi et al. 2024) as open-unlearning evaluates it, as a plugin.

What it shares with TOFU (flags, config, retain logs, plots) is
``benchmarks/unlearning/benchmark.py``; here are MUSE's own flags, splits and few-shot rows.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...engine import Rows
from ..unlearning.benchmark import UnlearningBenchmark
from ..unlearning.eval_logs import EvalLogs
from . import spec
from .config import DEFAULT_METRICS, MIA_METRICS, MuseConfig
from .data import fewshot_pairs, load_eval_logs, load_muse_split

#: resource name -> (MUSE config, split)
SPLIT_RESOURCES = {
    "muse_verbmem_forget": ("verbmem", "forget"),
    "muse_knowmem_forget_qa": ("knowmem", "forget_qa"),
    "muse_knowmem_retain_qa": ("knowmem", "retain_qa"),
    "muse_privleak_forget": ("privleak", "forget"),
    "muse_privleak_holdout": ("privleak", "holdout"),
}


def with_icl(cfg: MuseConfig) -> MuseConfig:
    """``cfg`` with the knowmem few-shot rows read from the data where it has none."""
    update = {f"{side}_icl": fewshot_pairs(load_muse_split(cfg.source, "knowmem", f"{side}_qa_icl"))
              for side in ("forget", "retain") if not getattr(cfg, f"{side}_icl")}
    return cfg.model_copy(update=update) if update else cfg


#: the split a relearn's ``split=forget`` (its default) trains on: the forget corpus's text, as
#: the relearning work on MUSE fine-tunes on forget-set text (privleak's forget rows are that text)
FORGET_CORPUS = "muse_privleak_forget"


def muse_resources(cfg: MuseConfig) -> dict[str, Any]:
    """The splits (lazy :class:`Rows`); the retain logs and models are added by the base class."""
    source = cfg.source
    return {name: Rows(lambda c=config, s=split: load_muse_split(source, c, s), f"{source}:{config}/{split}", limit=cfg.limit,
                       also=("forget",) if name == FORGET_CORPUS else ())
            for name, (config, split) in SPLIT_RESOURCES.items()}


class MuseBenchmark(UnlearningBenchmark):
    name = "muse"
    group = spec.GROUP
    spec = spec
    default_metrics, mia_metrics = DEFAULT_METRICS, MIA_METRICS
    description = "MUSE (Shi et al. 2024): knowledge and verbatim memorization ROUGE, privleak, MIAs"
    Config = MuseConfig

    def add_own_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--muse-data", default=None, help="MUSE: folder in MUSE's layout (or muse-bench/MUSE-<split> when online)")
        p.add_argument("--muse-split", default="News", choices=["News", "Books"], help="MUSE: which corpus (selects the hub id when no folder is given)")
        p.add_argument("--muse-retain-logs", default=None, help="MUSE: the retain model's MUSE_EVAL.json")

    def own_config(self, args: argparse.Namespace) -> dict[str, Any]:
        return dict(split=args.muse_split)

    def config_values(self, cfg: MuseConfig) -> dict[str, Any]:
        return {**super().config_values(cfg), "data_split": cfg.split}

    def data_resources(self, cfg: MuseConfig) -> dict[str, Any]:
        return muse_resources(cfg)

    def eval_logs(self, path: str, metrics: Any) -> EvalLogs:
        return load_eval_logs(path, metrics)

    def graph_config(self, cfg: MuseConfig) -> MuseConfig:
        return with_icl(cfg)
