"""Whether a tokenizer's pad token is its own token, decided without loading anything.

``HFModel.mask_mode_matters`` asks this: open-unlearning's ``ids != pad`` masking and
padding-only masking give different numbers only where a real token equals the pad id,
which cannot happen with a dedicated pad token. Read from the tokenizer object, or from
the tokenizer files alone (so a warm rerun imports no transformers).

The model check before a run (``benchmarks/common.check_model``) reads the same files for
what else it needs to know up front: is there a vocabulary, a chat template, a bos equal to
the eos, a pad the chat template writes, what the template writes after an answer (then the one
warning line, :func:`masking_quirk`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _template_text(template: Any) -> str:
    """Every string of a chat template (a string, or a list of {name, template} dicts)."""
    if isinstance(template, str):
        return template
    if isinstance(template, dict):
        return "\n".join(_template_text(v) for v in template.values())
    if isinstance(template, (list, tuple)):
        return "\n".join(_template_text(v) for v in template)
    return ""


def dedicated_pad_object(tok: Any) -> bool:
    """The tokenizer's pad is its own token: not bos/eos/unk, not in the chat template."""
    pad = tok.pad_token_id
    if pad is None or pad in {tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}:
        return False
    return str(tok.pad_token) not in _template_text(getattr(tok, "chat_template", None))


def _token_content(value: Any) -> str | None:
    if isinstance(value, dict):  # a serialized AddedToken
        value = value.get("content")
    return value if isinstance(value, str) else None


def dedicated_pad_files(root: Path) -> bool:
    """:func:`dedicated_pad_object` from tokenizer_config.json and special_tokens_map.json.

    Both files are read and every value they give a token counts; when the pad or the eos
    is not found in either (pad = eos, or special tokens this cannot see), the answer is
    False, the safe side.
    """
    found, text = _special_and_template(root)
    pads, others = found["pad_token"], found["eos_token"] | found["bos_token"] | found["unk_token"]
    if len(pads) != 1 or not found["eos_token"]:
        return False
    (pad,) = pads
    return pad not in others and pad not in text


def template_pad_files(root: Path) -> str | None:
    """The pad token (the eos when there is none: open-unlearning's rule) when the chat template
    writes it, e.g. ChatML's ``<|im_end|>`` ending every turn; None otherwise or when unknown."""
    found, text = _special_and_template(root)
    pads = found["pad_token"] or found["eos_token"]
    return next((p for p in sorted(pads) if p and p in text), None)


def _special_and_template(root: Path) -> tuple[dict[str, set[str]], str]:
    """Every value tokenizer_config.json / special_tokens_map.json give each special token, and
    every chat template text of the folder."""
    found: dict[str, set[str]] = {k: set() for k in ("pad_token", "eos_token", "bos_token", "unk_token")}
    template = []
    for name in ("tokenizer_config.json", "special_tokens_map.json", "chat_template.json"):
        try:
            data = json.loads((root / name).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        for key, values in found.items():
            content = _token_content(data.get(key))
            if content is not None:
                values.add(content)
        template.append(_template_text(data.get("chat_template")))
    try:
        template.append((root / "chat_template.jinja").read_text())
    except OSError:
        pass
    return found, "\n".join(template)


def masking_quirk(bos_eos: bool, template_pad: str | None, tail: str | None = None, reference: bool = True) -> str | None:
    """The warning's text when open-unlearning's scoring counts what is not the model's answer:
    ``tail``, the chat template's tokens scored with each answer (``chat_quirks.quirk_text``),
    and, under the ``reference`` masking (``ids != pad``), the real tokens it hides (a pad (eos)
    token the chat template writes inside the prompt, or bos = eos with no pad token); None when
    neither applies."""
    if not reference:
        quirk = None
    elif template_pad:
        quirk = (f"the pad token {template_pad} (pad = eos) is also written by the chat template at each turn's "
                 f"end, so the default masking hides every {template_pad} of the prompt from attention")
    elif bos_eos:
        quirk = "the tokenizer has no pad token and its bos equals its eos, so the default masking also hides real bos/eos tokens"
    else:
        quirk = None
    parts = [tail] if tail else []
    if quirk:
        parts.append(f"{quirk} and changes scores; --attention-mask padding masks only padding")
    return "; and ".join(parts) + " (docs/gotchas.md)" if parts else None


def has_tokenizer(folder: Path) -> bool:
    """A vocabulary file is there (a tokenizer_config.json alone builds an empty tokenizer)."""
    names = ("tokenizer.json", "vocab.json", "vocab.txt", "tiktoken.model")
    return any((folder / n).is_file() for n in names) or any(folder.glob("*.model"))


def bos_is_eos_without_pad(folder: Path) -> bool:
    """The GPT-2 shape docs/gotchas.md warns about: no pad token (so pad = eos) and bos == eos,
    read from the tokenizer files alone (nothing loaded)."""
    tokens: dict[str, Any] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        for key in ("pad_token", "bos_token", "eos_token"):
            value = data.get(key) if isinstance(data, dict) else None
            value = value.get("content") if isinstance(value, dict) else value
            if value is not None:
                tokens.setdefault(key, value)
    return "pad_token" not in tokens and tokens.get("bos_token") is not None and tokens.get("bos_token") == tokens.get("eos_token")


def has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(config, dict) and config.get("chat_template"))
