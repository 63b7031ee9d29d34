"""HTTP to an OpenAI-compatible server: JSON in and out, retries, timeouts, the key kept secret.

Kept apart from the backend so that the one place which holds the API key is small
enough to read in a minute: the key is sent in the ``Authorization`` header and nowhere
else; every message this module raises is built from the URL path, the status and the
server's own error text, with the key (if a server echoes it) replaced by ``***``.
Only the standard library (urllib) is used: no client package to install.

Retries: 429, 5xx, a refused or reset connection and a timeout are retried with
exponential backoff (``backoff * 2**attempt`` seconds, ``Retry-After`` honoured up to
30 s); any other status is final at once (a 400 says the request is wrong, a 401 that
the key is, a 404 that the model or route is missing).
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Sequence

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class ServerError(RuntimeError):
    """A request to the server failed for good. ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0, detail: str = ""):
        super().__init__(message)
        self.status = status
        self.detail = detail


class Client:
    """One server: ``base`` is the URL up to (not including) ``/v1``; the key is read from
    the environment variable ``api_key_env`` when the client is made (absent: no header)."""

    def __init__(self, base: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 retries: int = 4, backoff: float = 0.5, concurrency: int = 8):
        self.base = base.rstrip("/")
        if self.base.endswith("/v1"):
            self.base = self.base[: -len("/v1")]
        self.api_key_env = api_key_env
        self._key = os.environ.get(api_key_env) or None
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.concurrency = max(1, int(concurrency))
        self.calls = 0  # HTTP requests sent (retries included): for the statistics

    def __repr__(self) -> str:  # never the key
        return f"Client({self.base!r}, api_key_env={self.api_key_env!r})"

    def redact(self, text: str) -> str:
        """``text`` with the key (if any) replaced by ``***``: for every message that leaves here."""
        return text.replace(self._key, "***") if self._key else text

    def get(self, path: str, timeout: float | None = None, retries: int | None = None) -> Any:
        return self._call("GET", path, None, timeout, retries)

    def post(self, path: str, body: dict, timeout: float | None = None, retries: int | None = None) -> Any:
        return self._call("POST", path, body, timeout, retries)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(x) for x in items]`` with at most ``concurrency`` calls in flight, in order."""
        if len(items) <= 1 or self.concurrency == 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    # -- internals
    def _call(self, method: str, path: str, body: dict | None, timeout: float | None, retries: int | None) -> Any:
        url = self.base + path
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        data = json.dumps(body).encode() if body is not None else None
        tries = (self.retries if retries is None else retries) + 1
        wait = self.backoff
        for attempt in range(tries):
            self.calls += 1
            last = attempt == tries - 1
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw) if raw.strip() else None
                except ValueError:
                    if path.endswith("/metrics") or not raw.lstrip().startswith((b"{", b"[")):
                        return raw.decode("utf-8", "replace")
                    raise ServerError(f"{method} {path}: the server's answer is not JSON", 200) from None
            except urllib.error.HTTPError as e:
                detail = self.redact(_error_text(e))
                if e.code in RETRY_STATUS and not last:
                    time.sleep(_retry_after(e, wait))
                    wait *= 2
                    continue
                raise ServerError(f"{method} {self.base}{path} answered {e.code}: {detail}", e.code, detail) from None
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as e:
                reason = getattr(e, "reason", e)
                if not last:
                    time.sleep(wait)
                    wait *= 2
                    continue
                raise ServerError(f"{method} {self.base}{path}: no answer ({self.redact(str(reason))})", 0) from None
        raise AssertionError("unreachable")


def _error_text(e: urllib.error.HTTPError) -> str:
    """The server's error message, one line: ``error.message`` (OpenAI, vLLM), ``detail``
    (FastAPI, transformers serve), else the body's start."""
    try:
        raw = e.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a body that cannot be read is just not shown
        return e.reason if isinstance(e.reason, str) else ""
    try:
        body = json.loads(raw)
    except ValueError:
        return " ".join(raw.split())[:200]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return " ".join(str(err["message"]).split())[:300]
        if isinstance(err, str):
            return " ".join(err.split())[:300]
        if body.get("detail"):
            return " ".join(str(body["detail"]).split())[:300]
    return " ".join(raw.split())[:200]


def _retry_after(e: urllib.error.HTTPError, default: float) -> float:
    try:
        return min(30.0, max(0.0, float(e.headers.get("Retry-After", default))))
    except (TypeError, ValueError):
        return default


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), max(1, size)):
        yield items[i : i + size]
