"""HTTP to an OpenAI-compatible server: JSON in and out, retries, a deadline, secrets kept secret.

Kept apart from the backend so that the one place which holds the credentials is small
enough to read in a minute: the API key is sent in the ``Authorization`` header and nowhere
else; user info in the URL (``http://user:pass@host/v1``) becomes HTTP basic auth; the URL's
query (``?api_key=...``) is kept on every route. Every message this module raises or says
is built from the URL as shown (:func:`parse_url`: user info and secret query values
masked), the route, the status and the server's own error text, with the key and the
password (if a server echoes them) replaced by ``***``. Only the standard library (urllib)
is used: no client package to install.

The backend's settings (:class:`ServerSettings`, given as ``--model-arg KEY=VALUE``) bound
each call. Retries: 429, 5xx, a refused or reset connection and a timeout are retried with
exponential backoff (``backoff * 2**attempt`` seconds, ``Retry-After`` honoured up to
30 s), each retry said in one line (:func:`progress.say`, at most one a second); any other
status is final at once (a 400 says the request is wrong, a 401 that the key is, a 404 that
the model or route is missing). ``deadline`` caps one call with its retries and waits: when
it is reached the call fails in one line naming the server and the last status. An answer
is read in chunks and refused once it passes ``max_body_mb``, so a runaway body never sits
in memory whole.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from ...backend import ServingError
from ...progress import say as progress_say
from ...redact import MASK, redact_text

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
RETRY_AFTER_MAX = 30.0  # seconds: a longer Retry-After is waited this long
NOTICE_INTERVAL = 1.0  # seconds between two retry lines of one client (the others are counted)
CHUNK = 1 << 20  # bytes read at a time
MB = 1 << 20


class ServerSettings(BaseModel):
    """The ``openai`` backend's settings, each one ``--model-arg KEY=VALUE`` (docs/servers.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout: float = Field(120.0, gt=0)  # seconds one attempt waits for its answer
    retries: int = Field(4, ge=0)  # attempts after the first, on 429 / 5xx / no answer
    backoff: float = Field(0.5, ge=0)  # seconds before the first retry, doubled after each
    concurrency: int = Field(8, ge=1)  # calls in flight at once
    deadline: float = Field(300.0, gt=0)  # seconds one call may take, its retries and waits included
    max_body_mb: float = Field(32.0, gt=0)  # an answer larger than this (MiB) is refused


class ServerError(ServingError):
    """A request to the server failed for good. ``status`` is the HTTP status (0: no answer);
    ``detail`` the server's error text, or why nothing came back."""

    def __init__(self, message: str, status: int = 0, detail: str = ""):
        super().__init__(message)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class ServerURL:
    """A server's URL taken apart: ``base`` (scheme, host, port, the path before ``/v1``),
    ``query`` (sent on every route), the basic-auth ``user``/``password`` from the user info,
    and ``shown``: the URL as every message prints it (user info, secret query values masked)."""

    base: str
    query: str
    user: str | None
    password: str | None
    shown: str

    def secrets(self) -> list[str]:
        """What must never be printed: the password and the secret query values, raw and quoted."""
        found = [self.password] if self.password else []
        found += [v for k, v in parse_qsl(self.query, keep_blank_values=False)
                  if redact_text(f"?{k}=x") != f"?{k}=x"]
        return [x for s in found for x in {s, quote(s, safe="")} if x]


def parse_url(url: str) -> ServerURL:
    """``http[s]://[user[:pass]@]host[:port][/path][/v1][?query]``; ValueError (one line, the
    URL masked) for anything else."""
    shown = redact_text(url.strip())
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{shown}: the target must be an http:// or https:// URL")
    try:
        parts.port  # a port that is not a number
    except ValueError:
        raise ValueError(f"{shown}: the port is not a number") from None
    if not parts.hostname:
        raise ValueError(f"{shown}: no host name in the URL")
    host = parts.netloc.rpartition("@")[2]
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    shown = redact_text(f"{parts.scheme}://{MASK + '@' if parts.username is not None else ''}{host}"
                        f"{parts.path.rstrip('/')}{'?' + parts.query if parts.query else ''}")
    return ServerURL(f"{parts.scheme}://{host}{path}", parts.query, user, password, shown)


class Client:
    """One server: ``base`` is its URL (a trailing ``/v1`` is dropped: routes add it); the key
    is read from the environment variable ``api_key_env`` when the client is made (absent: no
    header), unless the URL carries user info, which is sent as basic auth instead.
    ``settings`` bound every call; keywords (``timeout=``, ``retries=`` ...) override them."""

    def __init__(self, base: str, api_key_env: str = "OPENAI_API_KEY", settings: ServerSettings | None = None,
                 say: Callable[[str], None] | None = None, **overrides: Any):
        self.url = parse_url(base)
        self.base = self.url.base
        self.shown = self.url.shown
        self.name = f"openai:{self.shown}"  # how every message names the server
        self.settings = ServerSettings(**{**(settings or ServerSettings()).model_dump(), **overrides})
        self.api_key_env = api_key_env
        self._key = os.environ.get(api_key_env) or None
        if self.url.user is not None:
            pair = f"{self.url.user}:{self.url.password or ''}".encode()
            self._auth = "Basic " + base64.b64encode(pair).decode()
        else:
            self._auth = f"Bearer {self._key}" if self._key else None
        self._secrets = [s for s in (self._key, *self.url.secrets()) if s]
        self.say = say or progress_say
        self.calls = 0  # HTTP requests sent (retries included): for the statistics
        self._lock = threading.Lock()
        self._said_at, self._unsaid = -1e9, 0

    @property
    def timeout(self) -> float:
        return self.settings.timeout

    @property
    def concurrency(self) -> int:
        return self.settings.concurrency

    def __repr__(self) -> str:  # never the key, never the password
        return f"Client({self.shown!r}, api_key_env={self.api_key_env!r})"

    def redact(self, text: str) -> str:
        """``text`` with the key, the password and secret query values replaced by ``***``."""
        for s in self._secrets:
            text = text.replace(s, MASK)
        return redact_text(text)

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
        url = self.base + path + (f"?{self.url.query}" if self.url.query else "")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._auth:
            headers["Authorization"] = self._auth
        data = json.dumps(body).encode() if body is not None else None
        tries = (self.settings.retries if retries is None else retries) + 1
        wait = self.settings.backoff
        deadline = time.monotonic() + self.settings.deadline
        for attempt in range(tries):
            left = deadline - time.monotonic()
            final = attempt == tries - 1
            self.calls += 1
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(req, timeout=max(0.01, min(timeout or self.timeout, left))) as resp:
                    raw = self._read(resp, method, path)
                    kind = resp.headers.get_content_type()
                return self._decode(raw, kind, method, path)
            except urllib.error.HTTPError as e:
                detail = self.redact(_error_text(e))
                if e.code not in RETRY_STATUS or final:
                    after = f" after {attempt + 1} tries" if attempt else ""
                    raise ServerError(f"{self.name}: {method} {path} answered {e.code}{after}: {detail}", e.code,
                                      detail) from None
                hint = e.headers.get("Retry-After") if e.headers is not None else None
                pause = _retry_after(e, wait)
                unit = " s" if hint is not None and hint.strip().replace(".", "", 1).isdigit() else ""
                what = (f"{method} {path} throttled ({e.code}, Retry-After {hint}{unit})" if hint is not None
                        else f"{method} {path} answered {e.code}: {detail}")
                self._pause(pause, deadline, attempt, tries, what, f"{e.code} {detail}".strip(), e.code, method, path)
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, http.client.HTTPException) as e:
                reason = self.redact(str(getattr(e, "reason", e)) or type(e).__name__)
                if final and time.monotonic() >= deadline - 0.05:  # the deadline cut this attempt short
                    self._pause(0.0, deadline, attempt, tries, "", f"no answer: {reason}", 0, method, path)
                if final:
                    raise ServerError(f"{self.name}: {method} {path}: no answer ({reason})", 0, reason) from None
                self._pause(wait, deadline, attempt, tries, f"{method} {path}: no answer ({reason})",
                            f"no answer: {reason}", 0, method, path)
            wait *= 2
        raise AssertionError("unreachable")

    def _pause(self, pause: float, deadline: float, attempt: int, tries: int, what: str, last: str, status: int,
               method: str, path: str) -> None:
        """Wait before try ``attempt + 2``, saying so; at the deadline, fail in one line instead."""
        if time.monotonic() + pause >= deadline:
            n = attempt + 1
            raise ServerError(f"{self.name}: {method} {path}: gave up at the deadline of {_num(self.settings.deadline)} s "
                              f"after {n} {'try' if n == 1 else 'tries'} (last: {last}); more time: --model-arg "
                              "deadline=SECONDS", status, last.removeprefix("no answer: ")) from None
        self._notice(f"{self.name}: {what}: retrying in {_num(pause)} s (try {attempt + 2} of {tries})")
        time.sleep(pause)

    def _notice(self, line: str) -> None:
        """One retry line, at most one a second per client; the ones held back are counted in the next."""
        with self._lock:
            now = time.monotonic()
            if now - self._said_at < NOTICE_INTERVAL:
                self._unsaid += 1
                return
            more, self._unsaid, self._said_at = self._unsaid, 0, now
        self.say(f"evaldag: {line}" + (f" (and {more} other retries since the last line)" if more else ""))

    def _read(self, resp: Any, method: str, path: str) -> bytes:
        """The body in chunks, refused as soon as it passes ``max_body_mb`` (or says it will)."""
        cap = int(self.settings.max_body_mb * MB)
        size = resp.headers.get("Content-Length")
        buf = bytearray()
        if not (size is not None and size.strip().isdigit() and int(size) > cap):
            while len(buf) <= cap:
                chunk = resp.read(min(CHUNK, cap + 1 - len(buf)))
                if not chunk:
                    return bytes(buf)
                buf += chunk
        raise ServerError(f"{self.name}: {method} {path}: the answer is larger than {_num(self.settings.max_body_mb)} MB "
                          "(max_body_mb), refused; a larger cap: --model-arg max_body_mb=N", 200)

    def _decode(self, raw: bytes, kind: str, method: str, path: str) -> Any:
        """The answer as JSON; plain text only where a GET route gives text (``/metrics``)."""
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except RecursionError:
            raise ServerError(f"{self.name}: {method} {path}: the answer's JSON is nested too deeply to read", 200) from None
        except ValueError:
            if method == "GET" and (path.endswith("/metrics") or not raw.lstrip().startswith((b"{", b"["))):
                return raw.decode("utf-8", "replace")
            start = self.redact(" ".join(raw[:120].decode("utf-8", "replace").split()))
            raise ServerError(f"{self.name}: {method} {path}: the answer is not JSON ({kind}: {start})", 200) from None


def _error_text(e: urllib.error.HTTPError) -> str:
    """The server's error message, one line: ``error.message`` (OpenAI, vLLM), ``detail``
    (FastAPI, transformers serve), else the body's start."""
    try:
        raw = e.read(64 * 1024).decode("utf-8", "replace")  # an error page is read this far, never whole
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
        return min(RETRY_AFTER_MAX, max(0.0, float(e.headers.get("Retry-After", default))))
    except (TypeError, ValueError):
        return default


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), max(1, size)):
        yield items[i : i + size]


def _num(x: float) -> str:
    """``2`` for 2.0, ``2.5`` for 2.5: seconds and sizes as a user typed them."""
    return f"{x:g}"
