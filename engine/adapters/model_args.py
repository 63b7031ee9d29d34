"""``--model-arg [ROLE:]KEY=VALUE``: a backend's own settings, one generic option for all of them.

A backend declares its settings once, as a pydantic model (typed, with defaults and bounds:
``openai_http.ServerSettings``), and its factory takes ``model_args`` (a mapping of the
given keys to values) and calls :func:`settings`. The command line only splits the pairs
(:func:`parse_pairs`); which keys exist and what they accept is the backend's to say, so a
new setting is one field, not a new flag (lm-evaluation-harness's ``--model_args``,
open-unlearning's ``model_args``). Every mistake is one line naming the pair.

``ROLE:`` says which model a pair is for (``retain:tokenizer=DIR``: the retain model's);
without it, the pair is ``--model``'s. The old one-flag-per-setting spellings
(``--tokenizer``, ``--retain-served-model``, ``--max-model-len`` ...) are
:class:`DeprecatedAlias` actions: each writes its pair into ``--model-arg``'s list, so
nothing past the parse knows which spelling was used, and says once that it is deprecated.
"""

from __future__ import annotations

import argparse
import sys
from difflib import get_close_matches
from typing import Any, Iterable, Mapping, Sequence, TypeVar

import pydantic

FLAG = "--model-arg"
DEST = "model_arg"
DEFAULT_ROLE = "model"
NOTES = "deprecated_spellings"  # the Namespace attribute DeprecatedAlias leaves its warnings in
S = TypeVar("S", bound=pydantic.BaseModel)


def parse_pairs(items: Iterable[str] | None) -> dict[str, str]:
    """``["deadline=60", "max_body_mb=8"]`` -> ``{"deadline": "60", "max_body_mb": "8"}``; a
    pair without ``=``, an empty key or a key given twice is a ValueError of one line."""
    out: dict[str, str] = {}
    for item in items or ():
        key, eq, value = str(item).partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise ValueError(f"{FLAG} {item}: expected KEY=VALUE")
        if key in out:
            raise ValueError(f"{FLAG} {item}: {key} is given twice ({key}={out[key]} before)")
        out[key] = value.strip()
    return out


def split_role(item: str) -> tuple[str, str]:
    """``"retain:tokenizer=DIR"`` -> ``("retain", "tokenizer=DIR")``; no ``ROLE:`` before the
    ``=`` -> ``("model", item)`` (a value may hold ``:``: ``fallback=hf:DIR``)."""
    key = str(item).partition("=")[0]
    if ":" in key:
        role, _, rest = str(item).partition(":")
        return role.strip(), rest
    return DEFAULT_ROLE, str(item)


def parse_roles(items: Iterable[str] | None, roles: Iterable[str]) -> dict[str, dict[str, str]]:
    """The pairs of ``--model-arg`` per role: ``{"model": {...}, "retain": {...}}``. A role
    outside ``roles`` (the words the run's models answer to) is a ValueError of one line."""
    roles = tuple(roles)
    grouped: dict[str, list[str]] = {}
    for item in items or ():
        role, pair = split_role(item)
        if role not in roles:
            close = get_close_matches(role, roles, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"{FLAG} {item}: no model {role!r} in this run{hint} (ROLE: is one of "
                             f"{', '.join(roles)}; none means {DEFAULT_ROLE})")
        grouped.setdefault(role, []).append(pair)
    out: dict[str, dict[str, str]] = {}
    for role, pairs in grouped.items():
        try:
            out[role] = parse_pairs(pairs)
        except ValueError as e:  # name the pair as the user wrote it, its role included
            raise ValueError(str(e).replace(f"{FLAG} ", f"{FLAG} {'' if role == DEFAULT_ROLE else role + ':'}", 1)) from None
    return out


def pair_text(role: str, key: str, value: Any) -> str:
    """A pair as ``--model-arg`` spells it: ``retain:tokenizer=DIR``, ``deadline=60``."""
    return f"{'' if role == DEFAULT_ROLE else role + ':'}{key}={value}"


def role_of(flag: str) -> str:
    """The ``ROLE:`` of ``--model-arg`` for a model flag: ``--retain-model`` -> ``retain``, ``--model`` -> ``model``."""
    word = flag.removeprefix("--")
    return word.removesuffix("-model") if word.endswith("-model") else word


def model_arg(flag: str, key: str, value: Any) -> str:
    """The setting ``key`` of the model that ``flag`` names, as a message tells the user to give it:
    ``model_arg("--retain-model", "adapter_base", "DIR")`` -> ``--model-arg retain:adapter_base=DIR``."""
    return f"{FLAG} {pair_text(role_of(flag), key, value)}"


class DeprecatedAlias(argparse.Action):
    """An old spelling of one ``--model-arg`` pair (``--retain-tokenizer DIR`` is
    ``--model-arg retain:tokenizer=DIR``): the pair goes into ``--model-arg``'s list, and the
    warning naming the new spelling into ``NOTES``, which ``evaldag run`` prints once the run
    is done (:func:`say_deprecated`): an error stays the one line it is. Hidden from
    ``--help``, where ``--model-arg``'s own line names the old spellings."""

    def __init__(self, option_strings: Sequence[str], dest: str, role: str = DEFAULT_ROLE, key: str = "",
                 **kw: Any) -> None:
        self.role, self.key = role, key
        flag_only = kw.pop("nargs", None) == 0
        super().__init__(option_strings, DEST, nargs=0 if flag_only else None, default=None,
                         help=argparse.SUPPRESS, metavar=kw.pop("metavar", None))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        value = "true" if self.nargs == 0 else values
        mine = pair_text(self.role, self.key, "")
        kept = [i for i in getattr(namespace, DEST, None) or [] if not i.startswith(mine)]  # written again: the last one stands
        setattr(namespace, DEST, kept + [pair_text(self.role, self.key, value)])
        note = (f"evaldag: warning: {option_string} is deprecated and goes in the next release; write "
                f"{FLAG} {pair_text(self.role, self.key, 'VALUE' if self.nargs != 0 else 'true')}")
        notes = list(getattr(namespace, NOTES, None) or [])
        setattr(namespace, NOTES, notes + [note] if note not in notes else notes)


class DeprecatedFlag(argparse._StoreAction):
    """A flag kept for one release under its own meaning, hidden from ``--help``: it stores its
    value as before and leaves a warning naming ``instead`` in ``NOTES``."""

    def __init__(self, option_strings: Sequence[str], dest: str, instead: str = "", **kw: Any) -> None:
        self.instead = instead
        super().__init__(option_strings, dest, **{**kw, "help": argparse.SUPPRESS})

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        note = f"evaldag: warning: {option_string} is deprecated and goes in the next release; write {self.instead}"
        notes = list(getattr(namespace, NOTES, None) or [])
        setattr(namespace, NOTES, notes + [note] if note not in notes else notes)


def say_deprecated(args: argparse.Namespace) -> None:
    """The deprecation warnings of the old spellings ``args`` was parsed from, each once."""
    for note in getattr(args, NOTES, None) or ():
        print(note, file=sys.stderr)


#: the old one-flag spellings of pairs, kept for one release (hidden from --help)
QUALIFIERS = ("tokenizer", "served-model", "api-key-env", "fallback", "adapter-base")
VLLM_OPTIONS = ("max-model-len", "gpu-memory-utilization", "tensor-parallel-size", "enforce-eager")
HELP = (
    "a setting of a model's backend, repeatable; ROLE: retain, reference, base or classifier (max_length, class_id) for "
    "that model, none for --model. The "
    "scheme's backend names its keys: hf: tokenizer (for a folder without one), adapter_base, device_map, max_memory; "
    "openai:URL: tokenizer, served_model, api_key_env, deadline, max_body_mb, timeout ...; vllm:DIR: tokenizer, "
    "max_model_len, gpu_memory_utilization, tensor_parallel_size, enforce_eager; any: fallback=hf:DIR "
    "(docs/servers.md). Deprecated, for this release only: --tokenizer, --adapter-base, --served-model, "
    "--api-key-env, --fallback, their --retain-/--reference- twins, --max-model-len, --gpu-memory-utilization, "
    "--tensor-parallel-size, --enforce-eager; --device-map, --max-memory (every model's: device_map=, max_memory= "
    "for each role); --classifier-max-length, --classifier-class-id")


#: the run-wide weight flags a backend takes when it names them (``spec.resolve``'s defaults)
DTYPE_FLAG = (("--dtype",), dict(default="auto", choices=["auto", "bf16", "fp16", "fp32"],
                                 help="weights dtype: auto (the checkpoint's own), bf16, fp16, fp32"))
DEVICE_FLAG = (("--device",), dict(default="auto", help="auto (cuda > mps > cpu), cuda, cuda:1, mps, cpu"))


def flags(roles: tuple[str, ...] = (DEFAULT_ROLE,), vllm: bool = True,
          model_arg: bool = True) -> tuple[tuple[tuple[str, ...], dict[str, Any]], ...]:
    """``(names, add_argument keywords)`` of ``--model-arg`` and of the deprecated spellings of
    its pairs for ``roles`` (``--retain-tokenizer DIR`` is ``--model-arg retain:tokenizer=DIR``)."""
    out: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    if model_arg:
        out.append(((FLAG,), dict(action="append", default=None, metavar="[ROLE:]KEY=VALUE", help=HELP)))
    for role in roles:
        prefix = "" if role == DEFAULT_ROLE else f"{role}-"
        out += [((f"--{prefix}{q}",), dict(action=DeprecatedAlias, role=role, key=q.replace("-", "_"))) for q in QUALIFIERS]
    if vllm:
        out += [((f"--{o}",), dict(action=DeprecatedAlias, key=o.replace("-", "_"), **({"nargs": 0} if o == "enforce-eager" else {})))
                for o in VLLM_OPTIONS]
    return tuple(out)


def settings(cls: type[S], given: Mapping[str, Any] | None, scheme: str) -> S:
    """``cls`` (a backend's settings) from the ``--model-arg`` pairs ``given``: an unknown key
    names the close ones and every key there is; a bad value says what is needed."""
    given = dict(given or {})
    known = sorted(cls.model_fields)
    for key in given:
        if key not in cls.model_fields:
            close = get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"{FLAG} {key}={given[key]}: {scheme}: models take no setting {key!r}{hint} "
                             f"(they take: {', '.join(known)})")
    try:
        return cls(**given)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        raise ValueError(f"{FLAG} {key}={given.get(key)}: {_words(err)}") from None


def _words(err: Mapping[str, Any]) -> str:
    """pydantic's message in the words of a command line."""
    kind, msg = err.get("type", ""), str(err.get("msg", ""))
    if kind in ("float_parsing", "float_type"):
        return "a number is needed"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "a whole number is needed"
    msg = msg.removeprefix("Value error, ").replace("Input should be", "must be")
    return msg[:1].lower() + msg[1:]
