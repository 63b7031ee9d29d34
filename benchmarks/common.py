"""What every model benchmark shares: model options in its config, their CLI flags, the models.

:class:`ModelOptions` is the part of a benchmark's pydantic config that says which
checkpoints to load and how to prompt them; :func:`add_model_arguments` adds the matching
command-line flags (once, however many benchmarks a command names) and
:func:`model_options` reads them back into config fields -- the only Namespace reading,
called from each benchmark's ``config_from_args``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from ..engine.adapters.base import PromptTemplate
from .tofu.data import load_template_args

#: the flag that supplies each model resource (a benchmark's hint when a graph misses one)
RESOURCE_FLAGS = {"model": "--model DIR", "retain_model": "--retain-model DIR", "reference_model": "--reference-model DIR"}


class ModelOptions(BaseModel):
    """Which checkpoints a run loads (local folders, or hub ids when online) and how it prompts them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    retain_model: str | None = None
    reference_model: str | None = None
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    device: str = "auto"
    attention_mask: Literal["reference", "padding"] = "reference"
    template: PromptTemplate = PromptTemplate()
    joint_tokenization: bool = False  # False reproduces open-unlearning's boundary quirk


class RetainOptions(ModelOptions):
    """:class:`ModelOptions` plus where forget quality and privleak find the retain side.

    ``retain``: ``model`` (the same nodes bound to ``retain_model``), ``logs``
    (``retain_logs``: an open-unlearning or evaldag ``<GROUP>_EVAL.json``) or ``none``;
    left out, it follows from ``retain_model`` / ``retain_logs``.
    """

    retain_logs: str | None = None
    retain: Literal["none", "logs", "model"] = "none"

    @model_validator(mode="before")
    @classmethod
    def _retain(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {**data, "retain": retain_mode(data.get("retain"), data.get("retain_model"), data.get("retain_logs"))}
        return data


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Options for the models and the prompt, shared by TOFU, MUSE and WEAT (added once)."""
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
    p.add_argument("--template", choices=["plain", "chat"], default=None, help="plain: 'Question: '/'Answer: ' tags; chat: the tokenizer's chat template")
    p.add_argument("--template-args", default=None, help="open-unlearning template_args (a model config YAML/JSON or the bare mapping)")
    p.add_argument("--system-prompt", default=None, help="with --template chat: the system prompt")
    p.add_argument("--joint-tokenization", action="store_true", help="tokenize prompt+answer jointly (fixes open-unlearning's unscored boundary token)")
    p.add_argument("--data", default=None, help="the benchmark's data folder (or hub id); --<bench>-data when running several")
    p.add_argument("--retain-logs", default=None, help="the retain model's <BENCH>_EVAL.json, or a folder holding one per benchmark")


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`ModelOptions` fields from the flags :func:`add_model_arguments` added."""
    if args.template_args and args.template:
        raise ValueError("give --template or --template-args, not both")
    if args.template_args:
        template = load_template_args(args.template_args)
    elif args.template == "chat":
        template = PromptTemplate.chat(system_prompt=args.system_prompt)
    else:
        template = PromptTemplate.plain()
    return dict(model=args.model, retain_model=args.retain_model, reference_model=args.reference_model,
                dtype=args.dtype, device=args.device, attention_mask=args.attention_mask, template=template,
                joint_tokenization=args.joint_tokenization)


def bench_option(args: argparse.Namespace, bench: str, option: str) -> Any:
    """``--<bench>-<option>`` when given, else the shared ``--<option>`` (e.g. data, retain-logs)."""
    return getattr(args, f"{bench}_{option}", None) or getattr(args, option, None)


def retain_mode(retain: str | None, retain_model: str | None, retain_logs: str | None) -> str:
    """Where forget quality / privleak find the retain side: ``model``, ``logs`` or ``none``."""
    if retain_model and retain_logs:
        raise ValueError("give retain_logs (--retain-logs) or retain_model (--retain-model), not both")
    if retain is not None:
        return retain
    return "model" if retain_model else "logs" if retain_logs else "none"


def retain_logs_file(path: str | None, group: str) -> str | None:
    """A retain-logs path, or the ``<GROUP>_EVAL.json`` inside it when it is a folder."""
    if path and Path(path).is_dir():
        return str(Path(path) / f"{group}_EVAL.json")
    return path


def hf_model(path: str | None, opts: ModelOptions) -> Any:
    """A lazy :class:`HFModel` for ``path`` with the config's dtype, device and masking."""
    from ..engine.adapters.hf import HFModel  # torch and transformers: only when a model is asked for

    if path is None:
        return None
    if not Path(path).exists() and (path.startswith((".", "/")) or Path(path).suffix):
        raise FileNotFoundError(f"model folder not found: {path}")
    return HFModel(path, dtype=opts.dtype, device=opts.device, attention_mask=opts.attention_mask)


def model_resources(opts: ModelOptions) -> dict[str, Any]:
    """``model`` and, when given, ``retain_model`` and ``reference_model``."""
    if not opts.model:
        raise ValueError("--model is required (a local checkpoint folder)")
    out = {"model": hf_model(opts.model, opts)}
    if opts.retain_model:
        out["retain_model"] = hf_model(opts.retain_model, opts)
    if opts.reference_model:
        out["reference_model"] = hf_model(opts.reference_model, opts)
    return out
