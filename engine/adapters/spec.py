"""Model specs: ``hf:DIR|ID`` (the default), ``vllm:DIR|ID``, ``openai:URL``, ``replay:FILE`` … to a model resource.

One parser for every model flag (``--model``, ``--retain-model``, ``--reference-model``,
``--base-model``, the probes' generator) so they accept the same spellings and fail
the same way. The scheme is the text before the first ``:`` when it looks like one
(letters, digits, ``+.-``, at least two characters, so ``C:\\x`` is not a scheme); no
scheme means ``hf``. The factory of a scheme comes from the backend registry
(``evaldag.backends`` entry points), so a plugin's scheme parses here unchanged.

Qualifiers (``--tokenizer``, ``--served-model``, ``--api-key-env``, ``--fallback``)
go to the factory as keywords; a qualifier the backend does not take is an error
naming the flag, never silently dropped. ``model_args`` (``--model-arg KEY=VALUE``,
repeated) is the one keyword whose keys the backend itself declares and checks
(``model_args.py``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..backend import BACKEND_GROUP, Routed, backend_factory
from .hf import HFModel
from .vllm_lora import from_spec as vllm_from_spec

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):(.*)$", re.S)


class SpecError(ValueError):
    """A model spec that cannot be used: one line for ``evaldag: error:``."""


@dataclass(frozen=True)
class Spec:
    scheme: str
    target: str
    text: str

    @property
    def explicit(self) -> bool:
        """Whether the user wrote the scheme (then it is never globbed or read as @FILE)."""
        return self.text.startswith(self.scheme + ":")


def has_scheme(text: str) -> bool:
    """``openai:http://…`` or ``hf:./x`` yes; ``./ckpt``, ``org/name``, ``C:\\x`` no.

    Used by the sweep's parsing: a spec with a scheme is one model, not a glob or a list file.
    """
    m = _SCHEME.match(text)
    return bool(m) and not m.group(2).startswith("\\")


def path_shaped(text: str) -> bool:
    """Whether ``text`` can only be a local path, never a hub id: it ends in ``/``, starts
    with ``.``, ``/`` or ``~``, or holds a separator other than the hub's one ``/`` between
    owner and name. A missing one is then "no such folder", not the hub's repo-id rules."""
    seps = {os.sep, os.altsep or "/"} - {"/"}
    return (text.endswith(("/", os.sep)) or text.startswith((".", "/", "~")) or text.count("/") > 1
            or any(s in text for s in seps))


def check_path(text: str, flag: str) -> None:
    """A path-shaped ``text`` that does not exist is one line naming the flag (:func:`path_shaped`)."""
    if path_shaped(text) and not Path(text).expanduser().exists():
        raise SpecError(f"{flag} {text}: no such folder: {text}")


def parse(text: str, flag: str = "--model") -> Spec:
    text = str(text).strip()
    if not text:
        raise SpecError(f"{flag}: an empty model spec; give hf:DIR|ID, openai:URL or replay:FILE")
    if has_scheme(text):
        scheme, target = _SCHEME.match(text).groups()  # type: ignore[union-attr]
        if not target:
            raise SpecError(f"{flag} {text}: nothing after {scheme}:")
        return Spec(scheme.lower(), target, text)
    return Spec("hf", text, text)


def resolve(text: str, flag: str = "--model", **qualifiers: Any) -> Any:
    """The model resource a spec names (nothing loaded, nothing sent yet)."""
    fallback = qualifiers.pop("fallback", None)
    if fallback:
        fb_flag = "--fallback" if flag == "--model" else flag.replace("-model", "-fallback")
        return Routed(resolve(text, flag, **qualifiers), resolve(fallback, fb_flag))
    spec = parse(text, flag)
    factory = _factory(spec.scheme)
    if factory is None:
        known = ", ".join(f"{s}:" for s in _schemes())
        hint = " (an OpenAI-compatible server is openai:URL)" if spec.scheme in ("http", "https") else ""
        raise SpecError(f"{flag} {text}: unknown model scheme {spec.scheme!r}{hint}; known: {known}")
    given = {k: v for k, v in qualifiers.items() if v is not None}
    try:
        return factory(spec.target, **given)
    except TypeError as e:
        if "unexpected keyword" in str(e):
            bad = str(e).rsplit("'", 2)[-2] if "'" in str(e) else "?"
            raise SpecError(f"{flag} {text}: {spec.scheme}: models take no --{flag_word(bad)}") from None
        raise


def hands_over_weights(text: str) -> bool:
    """Whether the backend ``text`` names can give a model transform its weights (its factory
    has ``derive``: ``hf``), known from the spec alone; an unknown scheme counts as yes (its
    own line comes when it is resolved)."""
    parsed = parse(text)
    factory = _factory(parsed.scheme)
    return factory is None or hasattr(factory, "derive")


def flag_word(qualifier: str) -> str:
    """The command-line word of a factory keyword: ``served_model`` -> ``served-model``,
    ``model_args`` -> ``model-arg`` (one pair per flag)."""
    return "model-arg" if qualifier == "model_args" else qualifier.replace("_", "-")


def _factory(scheme: str) -> Any:
    """The scheme's factory from the backend registry (``evaldag.backends``); ``hf`` is
    built in, so a bare path works whatever is installed."""
    try:
        return backend_factory(scheme)
    except KeyError:
        if scheme == "hf":
            return lambda target, **q: HFModel(target, **q)
        if scheme == "vllm":  # built in too: a stale install's entry points still find it
            return vllm_from_spec
        return None


def _schemes() -> list[str]:
    return sorted({"hf", "vllm"} | {ep.name for ep in entry_points(group=BACKEND_GROUP)})
