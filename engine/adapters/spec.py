"""Model specs: ``hf:DIR|ID`` (the default), ``vllm:DIR|ID``, ``openai:URL``, ``replay:FILE`` … to a model resource.

One parser for every model flag (``--model``, ``--retain-model``, ``--reference-model``,
``--base-model``, the probes' generator) so they accept the same spellings and fail
the same way. The scheme is the text before the first ``:`` when it looks like one
(letters, digits, ``+.-``, at least two characters, so ``C:\\x`` is not a scheme); no
scheme means ``hf``. The factory of a scheme comes from the backend registry
(``evaldag.backends`` entry points), so a plugin's scheme parses here unchanged.

A model's settings (``--model-arg [ROLE:]KEY=VALUE``: ``tokenizer``, ``served_model``,
``deadline``, ``max_model_len`` ...) are the backend's to declare and check, never the
benchmark's: :func:`resolve` hands a key to the factory as a keyword when the factory
names that parameter, else in its ``model_args`` mapping when it takes one (a pydantic
settings class checks them there: ``model_args.settings``); a key the backend takes
neither way is one line naming the pair and the keys it does take. ``fallback`` is the
registry's own: the resource is a :class:`Routed` pair.
"""

from __future__ import annotations

import inspect
import os
import re
from dataclasses import dataclass
from difflib import get_close_matches
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..backend import BACKEND_GROUP, Routed, backend_factory
from .hf.hf_backend import from_spec as hf_from_spec
from .model_args import FLAG, pair_text, role_of
from .vllm.vllm_lora import from_spec as vllm_from_spec
from .openai.openai_model import from_spec as openai_from_spec

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


def resolve(text: str, flag: str = "--model", defaults: dict[str, Any] | None = None, **qualifiers: Any) -> Any:
    """The model resource a spec names (nothing loaded, nothing sent yet). ``qualifiers``: the
    model's own settings, flat or (an older caller's form) under ``model_args``; ``defaults``:
    the run's flags (``dtype``, ``device`` ...), each handed only to a factory that takes it
    (its parameters, or the ``run_flags`` it declares) and never over a setting of the model's own."""
    given = {k: v for k, v in qualifiers.items() if v is not None and k != "model_args"}
    given.update(qualifiers.get("model_args") or {})
    fallback = given.pop("fallback", None)
    spec = parse(text, flag)
    role = role_of(flag)
    if fallback:
        if spec.scheme == "hf":
            raise SpecError(f"{FLAG} {pair_text(role, 'fallback', fallback)}: only for a server or vLLM model "
                            f"({flag} openai:URL, vllm:DIR), not {flag} {text}")
        fb_flag = "--fallback" if flag == "--model" else flag.replace("-model", "-fallback")
        return Routed(resolve(text, flag, defaults, **given), resolve(fallback, fb_flag))
    factory = scheme_factory(spec.scheme)
    if factory is None:
        known = ", ".join(f"{s}:" for s in _schemes())
        hint = " (an OpenAI-compatible server is openai:URL)" if spec.scheme in ("http", "https") else ""
        raise SpecError(f"{flag} {text}: unknown model scheme {spec.scheme!r}{hint}; known: {known}")
    kwargs = route(factory, given, spec.scheme, role)
    params = _parameters(factory)[0]
    takes = set(getattr(factory, "run_flags", params)) & params
    kwargs.update({k: v for k, v in (defaults or {}).items() if k in takes and k not in kwargs and v is not None})
    if "flag" in params:
        kwargs["flag"] = flag
    try:
        return factory(spec.target, **kwargs)
    except TypeError as e:
        if "unexpected keyword" in str(e):
            bad = str(e).rsplit("'", 2)[-2] if "'" in str(e) else "?"
            raise SpecError(f"{FLAG} {pair_text(role, bad, given.get(bad))}: {spec.scheme}: models take no setting "
                            f"{bad!r}") from None
        raise


def route(factory: Any, given: dict[str, Any], scheme: str, role: str = "model") -> dict[str, Any]:
    """``given`` as ``factory``'s keywords: a key it names as a parameter goes as itself, any
    other into ``model_args`` when it takes that (its settings class checks it), else a SpecError."""
    params, takes_model_args = _parameters(factory)
    kwargs: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in given.items():
        if key in params - {"flag"}:
            kwargs[key] = value
        elif takes_model_args:
            rest[key] = value
        else:
            known = sorted(params - {"flag"})
            close = get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise SpecError(f"{FLAG} {pair_text(role, key, value)}: {scheme}: models take no setting {key!r}{hint} "
                            f"(they take: {', '.join(known) or 'none'})")
    if rest:
        kwargs["model_args"] = rest
    return kwargs


def hands_over_weights(text: str) -> bool:
    """Whether the backend ``text`` names can give a model transform its weights (its factory
    has ``derive``: ``hf``), known from the spec alone; an unknown scheme counts as yes (its
    own line comes when it is resolved)."""
    parsed = parse(text)
    factory = scheme_factory(parsed.scheme)
    return factory is None or hasattr(factory, "derive")


def _parameters(factory: Any) -> tuple[set[str], bool]:
    """A factory's keyword parameters (the spec's target, the first, left out) and whether it takes ``model_args``."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return set(), True
    named = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    names = {p.name for p in named[1:]} if named and named[0].kind is not named[0].KEYWORD_ONLY else {p.name for p in named}
    return names - {"model_args"}, "model_args" in names


def _built_in(scheme: str) -> Any:
    """The factory evaldag itself ships for ``scheme``, whatever its install's metadata says."""
    return {"hf": hf_from_spec, "vllm": vllm_from_spec, "openai": openai_from_spec}.get(scheme)


def scheme_factory(scheme: str) -> Any:
    """The scheme's factory from the backend registry (``evaldag.backends``); the built-in
    schemes work whatever is installed: a bare path, an install whose metadata names the
    ``HFModel`` class, or one whose entry points name a module that has since moved into its
    backend's folder (stale until ``pip install -e .``)."""
    try:
        factory = backend_factory(scheme)
    except KeyError:
        factory = None
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("evaldag.") or _built_in(scheme) is None:
            raise  # a third-party backend's own module is missing: its error, not ours to hide
        factory = None
    if factory is None or (scheme == "hf" and isinstance(factory, type)):
        return _built_in(scheme)
    return factory


def _schemes() -> list[str]:
    return sorted({"hf", "vllm"} | {ep.name for ep in entry_points(group=BACKEND_GROUP)})
