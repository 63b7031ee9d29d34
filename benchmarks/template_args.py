"""Prompt templates from open-unlearning's model configs: what every model benchmark's
``--template-args`` reads (``benchmarks/common.py``).

open-unlearning (commit d3d7cf9) keeps a model's prompt tags under ``template_args`` in
``configs/model/*.yaml``, next to ``model_args`` / ``tokenizer_args``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from ..engine.adapters.base import PromptTemplate
from .textfile import DataError, NotUTF8, read_utf8


def _read_mapping(path: Path) -> Any:
    text = read_utf8(path)
    if path.suffix == ".json":
        return json.loads(text)
    import yaml

    return yaml.safe_load(text)


def load_template_args(path: str | Path) -> PromptTemplate:
    """A :class:`PromptTemplate` from an open-unlearning model config or a bare mapping.

    The file (YAML, or JSON by suffix) either has a ``template_args:`` key (as
    ``configs/model/*.yaml`` do, next to ``model_args``/``tokenizer_args``) or *is* the
    mapping. Unknown keys are an error naming them; Hydra interpolations (``${...}``)
    are not resolved and are refused.
    """
    path = Path(path)
    try:
        data = _read_mapping(path)
    except NotUTF8 as e:
        raise DataError(str(e)) from None
    except Exception as e:  # yaml/json syntax errors, unreadable file
        raise DataError(f"{path}: cannot read template args: {e}") from None
    if not isinstance(data, Mapping):
        raise DataError(f"{path}: expected a mapping, got {type(data).__name__}")
    args = data.get("template_args", data)
    if not isinstance(args, Mapping):
        raise DataError(f"{path}: template_args must be a mapping, got {type(args).__name__}")
    known = set(PromptTemplate.model_fields)
    unknown = sorted(str(k) for k in args if k not in known)
    if unknown:
        hint = "" if "template_args" in data else " (a model config must put them under template_args:)"
        raise DataError(f"{path}: unknown template keys {unknown}; allowed: {sorted(known)}{hint}")
    interp = sorted(k for k, v in args.items() if isinstance(v, str) and "${" in v)
    if interp:
        raise DataError(f"{path}: Hydra interpolations are not resolved here: {interp}")
    try:
        return PromptTemplate(**args)
    except ValidationError as e:
        err = e.errors()[0]
        raise DataError(f"{path}: template key {'.'.join(map(str, err['loc']))!r}: {err['msg']}") from None


def template_from_text(text: str) -> PromptTemplate:
    """``plain``, ``chat`` or a ``template_args`` file, as the command line spells a template."""
    if text == "plain":
        return PromptTemplate.plain()
    if text == "chat":
        return PromptTemplate.chat()
    if Path(text).is_file():
        return load_template_args(text)
    raise ValueError(f"template {text!r}: give 'plain', 'chat', an open-unlearning template_args file "
                     "(a model config YAML/JSON) or a PromptTemplate")
