"""Command-line pieces every model benchmark shares: models, template, data, retain logs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..engine.adapters.base import PromptTemplate


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Options for the models and the prompt, shared by TOFU and MUSE (added once)."""
    if any("--model" in a.option_strings for a in p._actions):
        return
    p.add_argument("--model", help="the model under evaluation: a local checkpoint folder (or a hub id when online)")
    p.add_argument("--retain-model", help="the retain model: forget quality and privleak are computed through the same graph and cache")
    p.add_argument("--reference-model", help="the reference model of the Reference MIA attack")
    p.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cuda, cuda:1, mps, cpu")
    p.add_argument("--attention-mask", default="reference", choices=["reference", "padding"],
                   help="reference: open-unlearning's `ids != pad` masking, which also hides real eos (and bos) tokens "
                        "when pad == eos (the default); padding: mask only padding")
    p.add_argument("--batch-tokens", type=int, default=None, help="token budget per batch (default: per device)")
    p.add_argument("--template", choices=["plain", "chat"], default=None, help="plain: 'Question: '/'Answer: ' tags; chat: the tokenizer's chat template")
    p.add_argument("--template-args", default=None, help="open-unlearning template_args (a model config YAML/JSON or the bare mapping)")
    p.add_argument("--system-prompt", default=None, help="with --template chat: the system prompt")
    p.add_argument("--joint-tokenization", action="store_true", help="tokenize prompt+answer jointly (fixes open-unlearning's unscored boundary token)")
    p.add_argument("--data", default=None, help="the benchmark's data folder (or hub id); --<bench>-data when running several")
    p.add_argument("--retain-logs", default=None, help="the retain model's <BENCH>_EVAL.json, or a folder holding one per benchmark")


def template(args: argparse.Namespace) -> PromptTemplate:
    if args.template_args and args.template:
        raise ValueError("give --template or --template-args, not both")
    if args.template_args:
        from .tofu.data import load_template_args

        return load_template_args(args.template_args)
    if args.template == "chat":
        return PromptTemplate.chat(system_prompt=args.system_prompt)
    return PromptTemplate.plain()


def model(path: str | None, args: argparse.Namespace) -> Any:
    from ..engine.adapters.hf import HFModel

    if path is None:
        return None
    if not Path(path).exists() and (path.startswith((".", "/")) or Path(path).suffix):
        raise FileNotFoundError(f"model folder not found: {path}")
    return HFModel(path, dtype=args.dtype, device=args.device,
                   attention_mask=getattr(args, "attention_mask", "reference"))


def model_resources(args: argparse.Namespace) -> dict[str, Any]:
    if not args.model:
        raise ValueError("--model is required (a local checkpoint folder)")
    out = {"model": model(args.model, args)}
    if args.retain_model:
        out["retain_model"] = model(args.retain_model, args)
    if args.reference_model:
        out["reference_model"] = model(args.reference_model, args)
    return out


def data_source(args: argparse.Namespace, bench: str) -> str:
    src = getattr(args, f"{bench}_data", None) or args.data
    if not src:
        raise ValueError(f"--{bench}-data (or --data) is required: a folder with the {bench.upper()} subsets")
    return src


def retain_logs_path(args: argparse.Namespace, bench: str) -> str | None:
    path = getattr(args, f"{bench}_retain_logs", None) or args.retain_logs
    if path and Path(path).is_dir():
        return str(Path(path) / f"{bench.upper()}_EVAL.json")
    return path

