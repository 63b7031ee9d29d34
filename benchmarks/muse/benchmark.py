"""``evaldag run muse``: MUSE (Shi et al. 2024) as open-unlearning evaluates it, as a plugin."""

from __future__ import annotations

import argparse
from typing import Any

from ...engine import Node, Rows, Value
from .. import common
from ..unlearning import UnlearningBenchmark
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


def muse_resources(cfg: MuseConfig) -> dict[str, Any]:
    """The splits (lazy :class:`Rows`) and, when given, the retain logs; models are separate."""
    source = cfg.source
    out: dict[str, Any] = {}
    for name, (config, split) in SPLIT_RESOURCES.items():
        out[name] = Rows(lambda c=config, s=split: load_muse_split(source, c, s), f"{source}:{config}/{split}")
    if cfg.retain_logs:
        out["muse_retain_logs"] = Value(load_eval_logs(cfg.retain_logs, cfg.metrics).raw, kind="data", source=str(cfg.retain_logs))
    return out


class MuseBenchmark(UnlearningBenchmark):
    name = "muse"
    group = spec.GROUP
    spec = spec
    default_metrics, mia_metrics = DEFAULT_METRICS, MIA_METRICS
    description = "MUSE (Shi et al. 2024): knowledge and verbatim memorization ROUGE, privleak, MIAs"
    Config = MuseConfig

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        common.add_model_arguments(p)
        p.add_argument("--muse-data", default=None, help="MUSE: folder in MUSE's layout (or muse-bench/MUSE-<split> when online)")
        p.add_argument("--muse-split", default="News", choices=["News", "Books"], help="MUSE: which corpus (selects the hub id when no folder is given)")
        p.add_argument("--muse-retain-logs", default=None, help="MUSE: the retain model's MUSE_EVAL.json")

    def config_from_args(self, args: argparse.Namespace) -> MuseConfig:
        return MuseConfig(
            **common.model_options(args),
            metrics=self.metrics_from_args(args),
            data=common.bench_option(args, "muse", "data"),
            split=args.muse_split,
            retain_logs=common.retain_logs_file(common.bench_option(args, "muse", "retain_logs"), self.group),
        )

    def build(self, cfg: MuseConfig) -> tuple[list[Node], dict[str, Any]]:
        resources = muse_resources(cfg)
        resources.update(common.model_resources(cfg))
        return spec.nodes(cfg.metrics, with_icl(cfg)), resources
