"""Secrets out of what a run records (run.json's command line and provenance, hence the report).

A token pasted into a path or URL, or given to an ``--api-key``-style option, must not
land in files people share. Values are replaced by ``***``; the rest of the argument
stays, so the record still says which file or host was meant.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
# option names whose value is a secret: --api-key, --hf-token, --token, --client-secret, --password
SECRET_OPTION = re.compile(r"^--?(?:[\w-]*[-_])?(?:api[-_]?key|key|token|secret|password|passwd)$", re.IGNORECASE)
_PATTERNS = [
    re.compile(r"hf_[A-Za-z0-9]{20,}"),  # Hugging Face tokens
    re.compile(r"sk-[A-Za-z0-9_-]{16,}"),  # OpenAI-style keys
    re.compile(r"(?<=://)[^/@\s]+(?=@)"),  # URL userinfo: https://user:pass@host
]
_QUERY = re.compile(r"([?&;][\w-]*(?:key|token|secret|password|passwd|signature|sig)=)[^&#\s]*", re.IGNORECASE)


def redact_text(text: str) -> str:
    """``text`` with token-like values, URL userinfo and secret query values masked."""
    for pat in _PATTERNS:
        text = pat.sub(MASK, text)
    return _QUERY.sub(lambda m: m.group(1) + MASK, text)


def redact_argv(argv: list[Any]) -> list[Any]:
    """A command line with the values of secret options (``--api-key V``, ``--token=V``) masked too."""
    out: list[Any] = []
    hide_next = False
    for a in argv:
        if not isinstance(a, str):
            out.append(a)
            continue
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        name, eq, _ = a.partition("=")
        if SECRET_OPTION.match(name):
            out.append(f"{name}={MASK}" if eq else a)
            hide_next = not eq
            continue
        out.append(redact_text(a))
    return out


def redact(obj: Any) -> Any:
    """Every string inside ``obj`` (dicts, lists) masked; a ``command`` list also by option name."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_argv(v) if k == "command" and isinstance(v, list) else redact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v) for v in obj)
    return obj
