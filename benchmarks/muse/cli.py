"""``evaldag run muse``: options, data and models for the MUSE graph."""

from __future__ import annotations

import argparse

from ...engine import Rows, Value
from .. import common
from ..catalogue import parse_metrics
from . import spec
from .data import fewshot_pairs, load_eval_logs, load_muse_split

SPLIT_RESOURCES = {
    "muse_verbmem_forget": ("verbmem", "forget"),
    "muse_knowmem_forget_qa": ("knowmem", "forget_qa"),
    "muse_knowmem_retain_qa": ("knowmem", "retain_qa"),
    "muse_privleak_forget": ("privleak", "forget"),
    "muse_privleak_holdout": ("privleak", "holdout"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_model_arguments(p)
    p.add_argument("--muse-data", default=None, help="MUSE: folder in MUSE's layout (or muse-bench/MUSE-<split> when online)")
    p.add_argument("--muse-split", default="News", choices=["News", "Books"], help="MUSE: which corpus (selects the hub id when no folder is given)")
    p.add_argument("--muse-retain-logs", default=None, help="MUSE: the retain model's MUSE_EVAL.json")


def _source(args: argparse.Namespace) -> str:
    return getattr(args, "muse_data", None) or args.data or f"muse-bench/MUSE-{args.muse_split}"


def _metrics(args: argparse.Namespace) -> tuple[str, ...]:
    return parse_metrics(args.metrics, spec.DEFAULT_METRICS, {"mia": spec.MIA_METRICS}, spec.metric_names(), "MUSE", strict=len(args.benchmarks or []) <= 1)


def _config(args: argparse.Namespace, with_icl: bool = True) -> spec.MuseConfig:
    logs = common.retain_logs_path(args, "muse")
    if logs and args.retain_model:
        raise ValueError("give --retain-logs or --retain-model, not both")
    icl = (lambda side: fewshot_pairs(load_muse_split(_source(args), "knowmem", f"{side}_qa_icl"))) if with_icl else (lambda side: ())
    return spec.MuseConfig(
        template=common.template(args),
        forget_icl=icl("forget"),
        retain_icl=icl("retain"),
        retain="model" if args.retain_model else "logs" if logs else "none",
    )


def plan(args: argparse.Namespace):
    """The nodes alone (for ``evaldag graph``): the few-shot rows are left out of the params."""
    return spec.nodes(_metrics(args), _config(args, with_icl=False))


def build(args: argparse.Namespace):
    source = _source(args)
    metrics = _metrics(args)
    logs = common.retain_logs_path(args, "muse")
    cfg = _config(args)
    resources = common.model_resources(args)
    for name, (config, split) in SPLIT_RESOURCES.items():
        resources[name] = Rows(lambda c=config, s=split: load_muse_split(source, c, s), f"{source}:{config}/{split}")
    if logs:
        resources["muse_retain_logs"] = Value(load_eval_logs(logs).raw, kind="data")
    return spec.nodes(metrics, cfg), resources
