"""What every model benchmark shares: model options in its config, their CLI flags, the models.

:class:`ModelOptions` is the part of a benchmark's pydantic config that says which
checkpoints to load and how to prompt them; :func:`add_model_arguments` adds the matching
command-line flags and :func:`model_options` reads them back into config fields -- the
only Namespace reading, called from each benchmark's ``config_from_args``.

``--model`` itself is not declared here: a benchmark that evaluates a model sets
``takes_model = True`` and the command line owns the flag (``engine/options.py``:
repeatable, a sweep), reading the configs with the first checkpoint as ``model`` (each checkpoint of a sweep runs a
copy: ``Benchmark.for_model``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from ..engine.adapters import spec
from ..engine.adapters.base import PromptTemplate
from ..engine.adapters.chat_quirks import folder_facts, quirk_text
from ..engine.adapters.hf import is_adapter_dir
from ..engine.adapters.hf.hf_gguf import check_gguf, is_gguf
from ..engine.adapters.hf.hf_pad import (bos_is_eos_without_pad, has_chat_template, has_tokenizer,  # noqa: F401 - used as common.X too
                                      masking_quirk, template_pad_files)
from ..engine.adapters.hf.hf_peft import check_adapter
from ..engine.adapters.model_args import DEVICE_FLAG, DTYPE_FLAG, DeprecatedFlag, flags as model_arg_flags, parse_roles
from ..engine.argtypes import limit as limit_type, positive_int
from ..engine.option_owners import add_shared
from ..engine.registry import BENCHMARKS
from .template_args import load_template_args, template_from_text

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
    device_map: Literal["auto", "balanced", "balanced_low_0", "sequential"] | None = None  # accelerate's placement
    max_memory: str | None = None  # with device_map: "0=20GiB,cpu=64GiB"
    attention_mask: Literal["reference", "padding"] = "reference"
    # a server model's qualifiers per role ("model", "retain_model", "reference_model"):
    # tokenizer, served_model, api_key_env, fallback (docs/servers.md)
    backend_options: dict[str, dict[str, Any]] = {}
    template: PromptTemplate = PromptTemplate()
    joint_tokenization: bool = False  # False reproduces open-unlearning's boundary quirk
    answer_only: bool = False  # False scores the template's turn end and the appended eos (open-unlearning's way)

    @field_validator("template", mode="before")
    @classmethod
    def _template_as_the_flags_take_it(cls, value: Any) -> Any:
        """What ``--template`` and ``--template-args`` take works here too: ``"plain"``, ``"chat"``,
        or an open-unlearning ``template_args`` file (a Python user writes what the flag says)."""
        if isinstance(value, (str, Path)):
            return template_from_text(str(value))
        return value


class RetainOptions(ModelOptions):
    """:class:`ModelOptions` plus where forget quality and privleak find the retain side.

    ``retain``: ``model`` (the same nodes bound to ``retain_model``), ``logs``
    (``retain_logs``: an open-unlearning or evaldag ``<GROUP>_EVAL.json``) or ``none``;
    left out, it follows from ``retain_model`` / ``retain_logs``.
    """

    retain_logs: str | None = None
    retain: Literal["none", "logs", "model"] = "none"
    base_model: str | None = None  # the checkpoint --model was unlearned from (nf4_changed_fraction)
    mia_blind_baseline: bool = False  # a model-free classifier's AUC beside the MIAs' (metrics/unlearning/blind_mia.py)

    @model_validator(mode="before")
    @classmethod
    def _retain(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {**data, "retain": retain_mode(data.get("retain"), data.get("retain_model"), data.get("retain_logs"))}
        return data


def menu_metrics(bench: str, value: Any) -> Any:
    """A config's ``metrics`` as ``--metrics`` reads them: ``("all",)``, ``("default", "mia")`` or
    names, expanded by the benchmark's menu, so Python and the CLI accept the same words (an
    unknown name is refused, naming the known ones). An empty tuple stays empty. The menu is
    found through the registry (the benchmark module imports its config: no import back)."""
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not value or not all(isinstance(w, str) for w in value):
        return value  # pydantic says what is wrong with it
    return BENCHMARKS.get(bench).metric_menu().parse(",".join(value), bench=bench)


def _flag(*names: str, **kw: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return names, kw


ROLES = {"model": "--model", "retain_model": "--retain-model", "reference_model": "--reference-model"}
#: ``--model-arg ROLE:KEY=VALUE``'s roles: the word before ``:`` -> the model resource it qualifies
MODEL_ROLES = {"model": "model", "retain": "retain_model", "reference": "reference_model", "base": "base_model",
               "classifier": "classifier_model"}  # the classifier's settings: unlearning/classifier.py
MODEL_FLAGS = (
    *model_arg_flags(),
    DTYPE_FLAG,
    DEVICE_FLAG,
    # accelerate's placement (pip install 'evaldag[big]'), the hf backend's per model: --model-arg device_map=auto
    _flag("--device-map", action=DeprecatedFlag, default=None, choices=["auto", "balanced", "balanced_low_0", "sequential"],
          instead="--model-arg device_map=VALUE (and retain:device_map=VALUE ... for the other models)"),
    _flag("--max-memory", action=DeprecatedFlag, default=None,
          instead="--model-arg max_memory=VALUE (and retain:max_memory=VALUE ... for the other models)"),
    _flag("--attention-mask", default="reference", choices=["reference", "padding"],
          help="reference: open-unlearning's `ids != pad` masking, which also hides real eos (and bos) tokens "
               "when pad == eos (the default); padding: mask only padding"),
)
RETAIN_FLAGS = (
    _flag("--retain-model", help="the retain model: forget quality and privleak are computed through the same graph and cache"),
    _flag("--reference-model", help="the reference model of the Reference MIA attack"),
    *model_arg_flags(("retain", "reference"), vllm=False, model_arg=False),
    _flag("--retain-logs", default=None, help="the retain model's <BENCH>_EVAL.json, or a folder holding one per benchmark"),
)
PROMPT_FLAGS = (
    _flag("--template", default=None, metavar="plain|chat|FILE",
          help="plain: 'Question: '/'Answer: ' tags; chat: the tokenizer's chat template; FILE: open-unlearning "
               "template_args (a model config YAML/JSON or the bare mapping; --template-args FILE, deprecated, "
               "says the same)"),
    _flag("--template-args", action=DeprecatedFlag, default=None, instead="--template FILE"),
    _flag("--system-prompt", default=None, help="with --template chat: the system prompt"),
    _flag("--joint-tokenization", action="store_true", help="tokenize prompt+answer jointly (fixes open-unlearning's unscored boundary token)"),
    _flag("--answer-only", action="store_true", help="score the answer's own tokens only, not a chat template's turn end nor the appended eos"),
    _flag("--data", default=None, help="the benchmark's data folder (or hub id); --<bench>-data when running several"),
)


MAX_NEW_TOKENS_FLAG = _flag("--max-new-tokens", type=positive_int, default=None, metavar="N",
                            help="the most new tokens of each generated answer (default: each benchmark's, TOFU 200 "
                                 "for ROUGE, probes 300)")


def new_tokens(args: argparse.Namespace, default: int) -> dict[str, int]:
    """``max_new_tokens``: ``--max-new-tokens`` when given, else the benchmark's ``default``."""
    given = getattr(args, "max_new_tokens", None)
    return {"max_new_tokens": default if given is None else given}


LIMIT_FLAG = _flag("--limit", type=limit_type, default=None, metavar="N",
                   help="the first N rows of every split (TOFU, MUSE) or documents of every task (lmeval); "
                        "a fraction of each below 1 (lm-evaluation-harness's --limit); recorded in run.json")


def add_limit_argument(p: argparse.ArgumentParser) -> None:
    """``--limit``: one declaration with one meaning for every benchmark that takes it."""
    add_shared(p, *LIMIT_FLAG[0], **LIMIT_FLAG[1])


def add_model_arguments(p: argparse.ArgumentParser, *, retain: bool = True, prompt: bool = True) -> None:
    """The model flags (and, for a language-model benchmark, the retain side and the prompt).

    Several benchmarks of one command add the same flags: the same declarations, shared
    (``engine/option_owners.py``)."""
    for names, kw in MODEL_FLAGS + (RETAIN_FLAGS if retain else ()) + (PROMPT_FLAGS if prompt else ()):
        add_shared(p, *names, **kw)


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`ModelOptions` fields from the flags :func:`add_model_arguments` added."""
    template_args, template = getattr(args, "template_args", None), getattr(args, "template", None)
    if template_args and template:
        raise ValueError("give --template or --template-args, not both")
    if template not in (None, "plain", "chat"):  # --template FILE: open-unlearning's template_args
        template_args, template = template, None
        if not Path(template_args).expanduser().is_file():
            raise ValueError(f"--template {template_args}: give plain, chat or an open-unlearning template_args file "
                             "(no such file)")
    if template_args:
        prompt = load_template_args(template_args)
    elif template == "chat":
        prompt = PromptTemplate.chat(system_prompt=getattr(args, "system_prompt", None))
    else:
        prompt = PromptTemplate.plain()
    return dict(model=getattr(args, "model", None), retain_model=getattr(args, "retain_model", None),
                reference_model=getattr(args, "reference_model", None), dtype=args.dtype, device=args.device,
                device_map=args.device_map, max_memory=args.max_memory,
                attention_mask=args.attention_mask, template=prompt, backend_options=backend_options(args),
                joint_tokenization=getattr(args, "joint_tokenization", False), answer_only=getattr(args, "answer_only", False))


def backend_options(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """The ``--model-arg`` pairs (and their deprecated spellings) per model resource:
    ``{"model": {"tokenizer": ...}, "retain_model": {...}}``; what each key means is the backend's."""
    pairs = parse_roles(getattr(args, "model_arg", None), MODEL_ROLES)
    return {MODEL_ROLES[role]: given for role, given in pairs.items()}


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


def hf_model(path: str | None, opts: ModelOptions, flag: str = "--model") -> Any:
    """A lazy model resource for ``path``, built by the backend its scheme names (``hf`` when
    none) with the role's ``--model-arg`` settings and the run's dtype, device, masking and
    placement; an ``hf:`` checkpoint is checked first (:func:`check_model`). No weights load here."""
    if path is None:
        return None
    role = next((r for r, f in ROLES.items() if f == flag), "model")  # another flag (--base-model): its opts' "model"
    given = dict(opts.backend_options.get(role, {}))
    given.update(given.pop("model_args", None) or {})  # the nested form of an older Python caller
    parsed = spec.parse(path, flag)
    run_flags = dict(dtype=opts.dtype, device=opts.device, attention_mask=opts.attention_mask,
                     device_map=opts.device_map, max_memory=opts.max_memory)
    if parsed.scheme == "hf" and "fallback" not in given:
        spec.route(spec.scheme_factory("hf"), given, "hf", spec.role_of(flag))  # its keys, before the checks use two
        check_model(parsed.target, opts, flag, given.get("tokenizer"), given.get("adapter_base"))
    return spec.resolve(path, flag, defaults=run_flags, **given)


def model_resources(opts: ModelOptions) -> dict[str, Any]:
    """``model`` and, when given, ``retain_model`` and ``reference_model``."""
    if not opts.model:
        raise ValueError("--model is required (a local checkpoint folder)")
    out = {"model": hf_model(opts.model, opts)}
    if opts.retain_model:
        out["retain_model"] = hf_model(opts.retain_model, opts, "--retain-model")
    if opts.reference_model:
        out["reference_model"] = hf_model(opts.reference_model, opts, "--reference-model")
    return out


def check_model(path: str, opts: ModelOptions, flag: str = "--model", tokenizer: str | None = None,
                adapter_base: str | None = None) -> None:
    """Before any weights load: the checkpoint is there (a folder, or a hub id in the local
    cache when offline), its tokenizer has a chat template when the prompt needs one, and
    the device exists. Each problem is one ValueError naming the flag and the value."""
    if is_gguf(path) or path.lower().endswith(".gguf") and Path(path).expanduser().is_file():
        return check_gguf_model(path, opts, flag, tokenizer)
    folder = checkpoint_folder(path, flag)
    if folder is not None and (adapter_base or is_adapter_dir(folder)):  # an adapter: its base is checked as the model
        base = check_adapter(folder, adapter_base, flag, tokenizer)
        base_folder = checkpoint_folder(base, flag)
        if base_folder is not None and not (base_folder / "config.json").is_file():
            raise ValueError(f"{flag} {path}: its base {base}: no config.json there, so not a model checkpoint folder")
        if not has_tokenizer(folder) and base_folder is not None and not has_tokenizer(base_folder):
            raise ValueError(f"{flag} {path}: no tokenizer in the adapter's folder nor in its base {base}")
        tokenizer = str(folder if has_tokenizer(folder) else base_folder or base)  # the adapter's own, else the base's
        path, flag, folder = base, f"{flag} {path}: its base", base_folder
    if folder is not None:
        if not (folder / "config.json").is_file():
            raise ValueError(f"{flag} {path}: no config.json there, so not a model checkpoint folder")
        if tokenizer is None and Path(path).expanduser().is_dir() and not has_tokenizer(folder):
            role = spec.role_of(flag)
            raise ValueError(f"{flag} {path}: no tokenizer in {path}; pass --model-arg "
                             f"{'' if role == 'model' else role + ':'}tokenizer=DIR|ID")
        if tokenizer is not None:
            folder = checkpoint_folder(tokenizer, flag.removesuffix("model") + "tokenizer" if flag != "--model" else "--tokenizer") or folder
        if opts.template.apply_chat_template and not has_chat_template(folder):
            raise ValueError(f"--template chat: the tokenizer of {flag} {path} has no chat template "
                             "(use --template plain, or --template FILE: a model config with the model's tags)")
        masking_warning(flag, path, opts, bos_is_eos_without_pad(folder), template_pad_files(folder), lambda: folder_facts(folder))
    check_device(opts.device)


def check_gguf_model(path: str, opts: ModelOptions, flag: str, tokenizer: str | None) -> None:
    """:func:`check_model` for a GGUF file: its header (extra, architecture, tensor types), then
    the chat template and the masking warning from ``--tokenizer``'s files or the GGUF's own metadata."""
    header = check_gguf(path, flag)
    folder = checkpoint_folder(tokenizer, flag.removesuffix("model") + "tokenizer") if tokenizer is not None else None
    chat = has_chat_template(folder) if folder else tokenizer is not None or bool(header.chat_template)
    bos_eos = bos_is_eos_without_pad(folder) if folder else tokenizer is None and header.bos_is_eos_without_pad()
    pad_turn = template_pad_files(folder) if folder else None if tokenizer is not None else header.template_pad()
    if opts.template.apply_chat_template and not chat:
        raise ValueError(f"--template chat: the tokenizer of {flag} {path} has no chat template "
                         "(use --template plain, or --template FILE: a model config with the model's tags)")
    masking_warning(flag, path, opts, bos_eos, pad_turn, lambda: folder_facts(folder) if folder else tokenizer is None and header.chat_facts() or None)
    check_device(opts.device)


def masking_warning(flag: str, path: str, opts: ModelOptions, bos_eos: bool, template_pad: str | None, chat: Callable) -> None:
    """One line: the chat template's tokens scored after each answer, what the reference masking hides."""
    tail = quirk_text(chat()) if opts.template.apply_chat_template and not opts.answer_only else None
    if quirk := masking_quirk(bos_eos, opts.template.apply_chat_template and template_pad, tail, opts.attention_mask == "reference"):
        print(f"evaldag: warning: {flag} {path}: {quirk}", file=sys.stderr)


def checkpoint_folder(path: str, flag: str = "--model") -> Path | None:
    """The local folder of ``path`` (a folder, or a hub id's cached snapshot); None: a hub id to download."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    spec.check_path(path, flag)  # a path, not an org/name hub id: "no such folder"
    from huggingface_hub import try_to_load_from_cache  # only for hub ids

    cached = try_to_load_from_cache(path, "config.json")
    if isinstance(cached, str):
        return Path(cached).parent
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or \
            os.environ.get("TRANSFORMERS_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise ValueError(f"{flag} {path}: not a local folder, and not in the Hugging Face cache (offline: "
                         "HF_HUB_OFFLINE is set); give a checkpoint folder")
    return None


def tokenizer_files(path: str | None, tokenizer: str | None = None) -> dict[str, bytes] | None:
    """The vocabulary files of a local model's tokenizer (``--tokenizer`` when given), name ->
    bytes; None when it is not a local folder (nothing to compare)."""
    folder = Path(tokenizer or path or "").expanduser()
    if not (tokenizer or path) or not folder.is_dir():
        return None
    names = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "special_tokens_map.json")
    return {n: (folder / n).read_bytes() for n in names if (folder / n).is_file()}


def same_tokenizer_files(mine: dict[str, bytes], theirs: dict[str, bytes]) -> bool:
    """Whether the files both tokenizers have say the same thing. A file only one side has is
    no difference (transformers 5 no longer writes special_tokens_map.json), nor is the
    ``truncation``/``padding`` state a ``tokenizer(..., truncation=True)`` call leaves in a
    tokenizer.json it then saves (a Trainer's checkpoint of the same tokenizer)."""
    for name in set(mine) & set(theirs):
        a, b = mine[name], theirs[name]
        if a == b:
            continue
        if name != "tokenizer.json":
            return False
        try:
            da, db = json.loads(a), json.loads(b)
        except ValueError:
            return False
        for d in (da, db):
            d.pop("truncation", None)
            d.pop("padding", None)
        if da != db:
            return False
    return True


def check_device(device: str) -> None:
    """``--device cuda`` / ``cuda:N`` / ``mps`` must exist here (``auto`` picks what does)."""
    if device in ("auto", "cpu"):
        return
    import torch  # heavy: imported only when a device is named

    if device.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.split(":", 1)[1]) if ":" in device and device.split(":", 1)[1].isdigit() else 0
        if index >= count:
            raise ValueError(f"--device {device}: this machine has {count} CUDA device(s)")
    elif device == "mps" and not torch.backends.mps.is_available():
        raise ValueError("--device mps: MPS is not available on this machine")
