"""What a model's chat template does to open-unlearning's scoring, read without loading the model.

Two facts a run on a chat model should not keep silent, both read from the template text and
the tokenizer files (or a GGUF's header) alone -- jinja2 renders the template the way
transformers' ``apply_chat_template`` does, so a warm rerun still imports no transformers:

* the **default system prompt** the template writes when the conversation has no system turn
  (SmolLM2's "You are a helpful AI assistant named SmolLM, ..."): open-unlearning passes none,
  so every prompt carries it; run.json and the report name it;
* the **answer tail**: what the template writes after an assistant answer (ChatML's
  ``<|im_end|>`` and a newline), which open-unlearning scores as part of the answer, plus the
  eos it appends when the ids do not end in one. For a one-token answer ("Paris") three of the
  four averaged tokens are template tokens. ``--answer-only`` scores the answer's own tokens.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

_USER, _SYSTEM, _ANSWER = "\x01QUESTION\x01", "\x02SYSTEM\x02", "\x03ANSWER\x03"


@dataclass(frozen=True)
class ChatFacts:
    """``default_system_prompt``: what the template adds with no system turn (None: nothing);
    ``tail``: the text written after an answer; ``tail_tokens``: its ids' count plus the
    appended eos (None: not countable from these files)."""

    default_system_prompt: str | None
    tail: str
    tail_tokens: int | None
    eos_appended: bool


def render(template: str, messages: list[dict], add_generation_prompt: bool, specials: dict[str, str | None]) -> str:
    """The template rendered as transformers renders it (sandboxed jinja2, trimmed blocks)."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "26 Jul 2024"
    env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, ensure_ascii=False, indent=indent)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            **{k: v or "" for k, v in specials.items()})


def default_system_prompt(template: str, specials: dict[str, str | None]) -> str | None:
    """The system text the template writes when the conversation has none, else None.

    The text before the user's turn is compared with and without a system turn of our own:
    what stands where our system text would be is the template's default."""
    user = [{"role": "user", "content": _USER}]
    bare = render(template, user, True, specials)
    mine = render(template, [{"role": "system", "content": _SYSTEM}, *user], True, specials)
    if _USER not in bare or _SYSTEM not in mine or _USER not in mine:
        return None
    before_bare = bare[: bare.index(_USER)]
    head, rest = mine.split(_SYSTEM, 1)
    between = rest[: rest.index(_USER)]
    if len(before_bare) <= len(head) + len(between) or not before_bare.startswith(head) or not before_bare.endswith(between):
        return None
    text = before_bare[len(head): len(before_bare) - len(between)]
    return text or None


def answer_tail(template: str, specials: dict[str, str | None]) -> str:
    """What the template writes after an assistant answer (the conversation's end)."""
    text = render(template, [{"role": "user", "content": _USER}, {"role": "assistant", "content": _ANSWER}], False,
                  specials)
    return text.split(_ANSWER, 1)[1] if _ANSWER in text else ""


def facts(template: str | None, specials: dict[str, str | None], count: Callable[[str], list[str]] | None) -> ChatFacts | None:
    """The template's facts; ``count`` splits a text into tokens (None: not known). None when
    there is no template or it cannot be rendered here."""
    if not template:
        return None
    try:
        system = default_system_prompt(template, specials)
        tail = answer_tail(template, specials)
    except Exception:  # noqa: BLE001 - a template this renderer cannot run: nothing to say
        return None
    eos = specials.get("eos_token")
    pieces = count(tail) if count is not None and tail else ([] if not tail else None)
    appended = not (pieces and eos and pieces[-1] == eos)
    n = None if pieces is None else len(pieces) + (1 if appended else 0)
    return ChatFacts(system, tail, n, appended)


def quirk_text(f: ChatFacts | None) -> str | None:
    """The warning's words for the answer tail, or None when the template writes nothing after
    an answer (then only open-unlearning's appended eos is scored with it, as on the plain template)."""
    if f is None or not f.tail:
        return None
    eos = " and open-unlearning appends the eos" if f.eos_appended else ""
    n = ("template tokens" if f.tail_tokens is None
         else f"{f.tail_tokens} template token{'' if f.tail_tokens == 1 else 's'}")
    return (f"the chat template writes {f.tail!r} after each answer{eos}: {n} scored with every answer "
            "(--answer-only scores the answer's own tokens only)")


def model_facts(model: Any) -> ChatFacts | None:
    """A model resource's chat facts: its own ``chat_facts()`` (a GGUF, ``--tokenizer``, an adapter),
    else its folder's tokenizer files; None for a model that is not a local folder."""
    if hasattr(model, "chat_facts"):
        return model.chat_facts()
    return folder_facts(Path(model.path).expanduser()) if getattr(model, "is_dir", False) else None


def with_chat_facts(out: dict, model: Any) -> dict:
    """run.json's record of a model gains the system prompt its chat template writes when a
    conversation has none: a ``--template chat`` run without ``--system-prompt`` prompts with it."""
    try:
        f = model_facts(model)
    except Exception:  # noqa: BLE001 - provenance must never fail a finished run
        f = None
    if f is not None and f.default_system_prompt:
        out["chat_default_system_prompt"] = f.default_system_prompt
    return out


# ------------------------------------------------------------------------------ sources


def folder_facts(folder: Path) -> ChatFacts | None:
    """From a tokenizer folder's files (tokenizer_config.json, chat_template.jinja, tokenizer.json)."""
    template, specials = _folder_template(folder)
    return facts(template, specials, _folder_counter(folder))


def _folder_template(folder: Path) -> tuple[str | None, dict[str, str | None]]:
    specials: dict[str, str | None] = {}
    template: str | None = None
    try:
        template = (folder / "chat_template.jinja").read_text()
    except OSError:
        pass
    for name in ("special_tokens_map.json", "tokenizer_config.json", "chat_template.json"):
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
            value = data.get(key)
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                specials[key] = value
        t = data.get("chat_template")
        if isinstance(t, list):  # named templates: the default one
            t = next((x.get("template") for x in t if isinstance(x, dict) and x.get("name") == "default"), None)
        if isinstance(t, str) and template is None:
            template = t
    return template, specials


def _folder_counter(folder: Path) -> Callable[[str], list[str]] | None:
    file = folder / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        st = file.stat()
        tok = _tokenizer(str(file), st.st_mtime_ns, st.st_size)
    except Exception:  # noqa: BLE001 - an unreadable file: the count is not known
        return None
    return lambda text: tok.encode(text, add_special_tokens=False).tokens


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str, *stat: int) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def vocab_counter(tokens: list[str], types: list[int] | None, byte_level: bool) -> Callable[[str], list[str]]:
    """A GGUF's tokens as a counter: its control and user-defined tokens whole, the rest by the
    longest vocabulary entry (byte-level text as GPT-2 maps it) -- exact for the short tails
    templates write (a newline, a space), an estimate beyond them."""
    special = sorted((t for t, k in zip(tokens, types or []) if k in (3, 4) and t), key=len, reverse=True)
    vocab = set(tokens)
    table = _bytes_to_unicode() if byte_level else {}

    def count(text: str) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(text):
            hit = next((s for s in special if text.startswith(s, i)), None)
            if hit:
                out.append(hit)
                i += len(hit)
                continue
            j = next((k for k in range(len(text), i, -1) if _mapped(text[i:k], table) in vocab), i + 1)
            out.append(text[i:j])
            i = j
        return out

    return count


def _mapped(text: str, table: dict[int, str]) -> str:
    return "".join(table[b] for b in text.encode()) if table else text.replace(" ", "\u2581")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (byte-level BPE vocabularies spell bytes this way)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))
