"""``evaldag run tofu``: TOFU (Maini et al. 2024) as open-unlearning evaluates it, as a plugin."""

from __future__ import annotations

import argparse
from typing import Any

from ...engine import Node, Rows, Value
from ...engine.benchmark import positive_int
from ...engine.render.clusters import Split
from .. import common
from ..unlearning import UnlearningBenchmark
from . import spec
from .config import DEFAULT_METRICS, MIA_METRICS, TofuConfig
from .data import load_subset, tofu_splits
from .eval_logs import load_eval_logs

#: the resource each TOFU split is bound as
RESOURCE_OF_ROLE = {"forget": "tofu_forget", "holdout": "tofu_holdout", "retain": "tofu_retain", "real_authors": "tofu_ra", "world_facts": "tofu_wf"}


def tofu_resources(cfg: TofuConfig) -> dict[str, Any]:
    """The splits (lazy :class:`Rows`) and, when given, the retain logs; models are separate."""
    source = cfg.data
    if not source:
        raise ValueError("--tofu-data (or --data) is required: a folder with the TOFU subsets")
    out: dict[str, Any] = {}
    for role, subset in tofu_splits(cfg.forget_split, cfg.holdout_split).items():
        out[RESOURCE_OF_ROLE[role]] = Rows(lambda s=subset: load_subset(source, s), f"{source}:{subset}")
    if cfg.retain_logs:
        out["tofu_retain_logs"] = Value(load_eval_logs(cfg.retain_logs, cfg.metrics).raw, kind="data", source=str(cfg.retain_logs))
    return out


class TofuBenchmark(UnlearningBenchmark):
    name = "tofu"
    group = spec.GROUP
    spec = spec
    default_metrics, mia_metrics = DEFAULT_METRICS, MIA_METRICS
    description = "TOFU (Maini et al. 2024): forget quality, truth ratio, ROUGE, model utility, privleak, MIAs"
    Config = TofuConfig
    #: TOFU's own splits beside forget / holdout / retain: the bands of its graph drawing
    splits = (Split("ra", "real authors", r"(?:^|[^a-z])ra(?:[^a-z]|$)|real_?authors", rank=40),
              Split("wf", "world facts", r"(?:^|[^a-z])wf(?:[^a-z]|$)|world_?facts", rank=50))

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        common.add_model_arguments(p)
        p.add_argument("--tofu-data", default=None, help="TOFU: folder with <subset>.json|jsonl|parquet (or locuslab/TOFU when online)")
        p.add_argument("--forget-split", default="forget10", help="TOFU: forget01, forget05 or forget10")
        p.add_argument("--holdout-split", default=None, help="TOFU: default holdout<NN> matching the forget split")
        p.add_argument("--tofu-retain-logs", default=None, help="TOFU: the retain model's TOFU_EVAL.json")
        p.add_argument("--max-new-tokens", type=positive_int, default=200, help="greedy generation length for ROUGE")

    def config_from_args(self, args: argparse.Namespace) -> TofuConfig:
        return TofuConfig(
            **common.model_options(args),
            metrics=self.metrics_from_args(args),
            data=common.bench_option(args, "tofu", "data"),
            forget_split=args.forget_split,
            holdout_split=args.holdout_split,
            retain_logs=common.retain_logs_file(common.bench_option(args, "tofu", "retain_logs"), self.group),
            max_new_tokens=args.max_new_tokens,
        )

    def build(self, cfg: TofuConfig) -> tuple[list[Node], dict[str, Any]]:
        resources = tofu_resources(cfg)
        resources.update(common.model_resources(cfg))
        return spec.nodes(cfg.metrics, cfg), resources
