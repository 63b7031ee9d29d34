"""``--model-arg KEY=VALUE``: a backend's own settings, one generic option for all of them.

A backend declares its settings once, as a pydantic model (typed, with defaults and bounds:
``openai_http.ServerSettings``), and its factory takes ``model_args`` (a mapping of the
given keys to values) and calls :func:`settings`. The command line only splits the pairs
(:func:`parse_pairs`); which keys exist and what they accept is the backend's to say, so a
new setting is one field, not a new flag (lm-evaluation-harness's ``--model_args``,
open-unlearning's ``model_args``). Every mistake is one line naming the pair.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any, Iterable, Mapping, TypeVar

import pydantic

FLAG = "--model-arg"
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
