"""``evaldag run tofu``: options, data and models for the TOFU graph."""

from __future__ import annotations

import argparse

from ...engine import Rows, Value
from .. import common
from ..catalogue import parse_metrics
from . import spec
from .data import load_eval_logs, load_subset, tofu_splits

RESOURCE_OF_ROLE = {"forget": "tofu_forget", "holdout": "tofu_holdout", "retain": "tofu_retain", "real_authors": "tofu_ra", "world_facts": "tofu_wf"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_model_arguments(p)
    p.add_argument("--tofu-data", default=None, help="TOFU: folder with <subset>.json|jsonl|parquet (or locuslab/TOFU when online)")
    p.add_argument("--forget-split", default="forget10", help="TOFU: forget01, forget05 or forget10")
    p.add_argument("--holdout-split", default=None, help="TOFU: default holdout<NN> matching the forget split")
    p.add_argument("--tofu-retain-logs", default=None, help="TOFU: the retain model's TOFU_EVAL.json")
    p.add_argument("--max-new-tokens", type=int, default=200, help="greedy generation length for ROUGE")


def _config(args: argparse.Namespace) -> spec.TofuConfig:
    logs = common.retain_logs_path(args, "tofu")
    if logs and args.retain_model:
        raise ValueError("give --retain-logs or --retain-model, not both")
    return spec.TofuConfig(
        template=common.template(args),
        joint_tokenization=args.joint_tokenization,
        retain="model" if args.retain_model else "logs" if logs else "none",
        max_new_tokens=args.max_new_tokens,
    )


def plan(args: argparse.Namespace):
    """The nodes alone (for ``evaldag graph``): no data, no model needed."""
    return spec.nodes(_metrics(args), _config(args))


def build(args: argparse.Namespace):
    source = common.data_source(args, "tofu")
    metrics = _metrics(args)
    logs = common.retain_logs_path(args, "tofu")
    cfg = _config(args)
    resources = common.model_resources(args)
    for role, subset in tofu_splits(args.forget_split, args.holdout_split).items():
        resources[RESOURCE_OF_ROLE[role]] = Rows(lambda s=subset: load_subset(source, s), f"{source}:{subset}")
    if logs:
        resources["tofu_retain_logs"] = Value(load_eval_logs(logs).raw, kind="data")
    return spec.nodes(metrics, cfg), resources


def _metrics(args: argparse.Namespace) -> tuple[str, ...]:
    return parse_metrics(args.metrics, spec.DEFAULT_METRICS, {"mia": spec.MIA_METRICS}, spec.metric_names(), "TOFU", strict=len(args.benchmarks or []) <= 1)
