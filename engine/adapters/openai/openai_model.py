"""A model behind an OpenAI-compatible server, as an evaluation resource (``openai:URL``).

Nothing is loaded here: the weights live in the server. What this module owns is the
server's **identity** and the **checks** a run makes before any work:

* ``check()`` (called when the spec is resolved, before anything is read or written):
  the server answers, the key is accepted, the served model exists (or is the only
  one), and the local tokenizer agrees with the server's on one probe text (through
  ``/tokenize`` where the server has it). Each failure is one :class:`BackendError`
  line.
* ``fingerprint()``: the server kind and version, the served model's id and
  ``max_model_len``, the dtype the user states, the local tokenizer's fingerprint and
  a **probe**: the greedy ids and log-probs (rounded to 1e-3, so a server that is not
  batch-invariant does not flap) of one fixed short prompt. Weights changed behind the
  same name give another probe, so another fingerprint, so the request cache
  recomputes; a restarted server with the same weights is warm; a Hugging Face model
  and a server never share a fingerprint (``openai-2`` vs ``hf-*``).
* the capabilities it found (``logprob_mode``, ``gen_mode``), detected once per
  resource and recorded in ``describe()`` (so in run.json).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pathlib import Path

from ...backend import Capabilities, Identity, ModelResource
from ..hf import _ensure_pad
from ..hf.hf_encoder import HFEncoder
from .openai_adapter import OpenAIAdapter, server_capabilities
from ..model_args import settings as backend_settings
from .openai_http import Client, ServerError, ServerSettings, parse_url

PROBE_TEXT = "The capital of France is"
PROBE_TOKENS = 4


class BackendError(ValueError):
    """A model spec that cannot be used: one line for ``evaldag: error:``."""


class Server:
    """One served model on one server: the client, the model id, what it can do."""

    def __init__(self, spec: str, client: Client, served: str | None, encoder: Any):
        self.spec, self.client, self.served, self.encoder = spec, client, served, encoder
        self.logprob_mode: str | None = None  # "prompt_logprobs", "echo" or "none"
        self.gen_mode: str | None = None  # "ids", "text" or "chat"
        self.info: dict = {}

    def body(self, body: dict) -> dict:
        return {"model": self.served, **body} if self.served else body

    def post_completion(self, body: dict) -> dict:
        return self._object(self.client.post("/v1/completions", self.body(body)), "/v1/completions")

    def post_chat(self, body: dict) -> dict:
        return self._object(self.client.post("/v1/chat/completions", self.body(body)), "/v1/chat/completions")

    def _object(self, answer: Any, path: str) -> dict:
        """An answer is a JSON object; anything else is the server's failure, in one line."""
        if not isinstance(answer, dict):
            what = "nothing" if answer is None else f"a JSON {type(answer).__name__}"
            raise ServerError(f"{self.spec}: POST {path}: the answer is {what}, not a JSON object", 200)
        return answer

    def prompt_text(self, ids: list[int]) -> str:
        """A token-id prompt as text for a server that takes text: the special tokens the
        server's own tokenizer adds (a leading bos) are left for it to add."""
        bos = getattr(getattr(self.encoder, "tokenizer", None), "bos_token_id", None)
        if ids and bos is not None and ids[0] == bos:
            ids = ids[1:]
        return self.encoder.decode(ids, skip_special_tokens=False)

    def prompts(self, seqs: list[list[int]]) -> Any:
        if self.gen_mode == "ids":
            return seqs
        texts = [self.prompt_text(s) for s in seqs]
        return texts if len(texts) > 1 else texts[0]  # one text alone: some servers take no list

    def detect(self) -> None:
        """Find once how prompts go in (ids, text, chat) and how prompt log-probs come out."""
        if self.gen_mode is not None:
            return
        ids = self.encoder.encode(PROBE_TEXT, add_special_tokens=True)
        try:
            self.post_completion({"prompt": [ids], "max_tokens": 1, "temperature": 0})
            self.gen_mode = "ids"
        except ServerError as e:
            if e.status not in (400, 422):
                if e.status in (404, 405):
                    self.gen_mode, self.logprob_mode = "chat", "none"
                    return
                raise
            self.gen_mode = "text"
        self.logprob_mode = "none"
        tries = [("prompt_logprobs", {"prompt_logprobs": 1})] if self.gen_mode == "ids" else []
        tries.append(("echo", {"echo": True, "logprobs": 1}))
        for mode, extra in tries:
            try:
                ans = self.post_completion({"prompt": self.prompts([ids]), "max_tokens": 1, "temperature": 0, **extra})
            except ServerError as e:
                if e.status in (400, 422):
                    continue
                raise
            ch = ((ans or {}).get("choices") or [{}])[0]
            got = ch.get("prompt_logprobs") if mode == "prompt_logprobs" else (ch.get("logprobs") or {}).get("token_logprobs")
            if isinstance(got, list) and len(got) >= len(ids) and any(x is not None for x in got[1:len(ids)]):
                self.logprob_mode = mode
                return


class OpenAIModel(ModelResource):
    """``openai:URL`` with its qualifiers: ``served`` (``--served-model``), ``tokenizer``
    (``--tokenizer DIR|ID``: the local tokenizer that builds prompts), ``api_key_env``,
    ``dtype`` (what the server runs, as the user states it; part of the identity) and the
    backend's ``settings`` (``--model-arg``: timeouts, deadline, body cap; keywords such as
    ``timeout=`` override single ones). ``spec`` is the URL as printed: credentials masked."""

    backend = "openai"

    def __init__(self, url: str, tokenizer: str | None = None, served: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", dtype: str = "auto", settings: ServerSettings | None = None,
                 **overrides: Any):
        self.client = Client(url.rstrip("/"), api_key_env=api_key_env, settings=settings, **overrides)
        self.url = self.client.shown
        self.spec = f"openai:{self.url}"
        self.name = self.spec
        self.tokenizer, self.dtype = tokenizer, dtype
        self._served_arg = served
        self._encoder: Any = None
        self._server: Server | None = None
        self._fp: str | None = None
        self._identity: dict | None = None
        self._adapter: Any = None

    # -- checks (before any work)
    def check(self) -> "OpenAIModel":
        """Raise :class:`BackendError` (one line) when the server cannot be used as given; the
        checks' retries are not said (their failure is that one line, nothing before it)."""
        if not self.tokenizer:
            raise BackendError(f"{self.spec} needs a local tokenizer that builds the prompts: --model-arg tokenizer=DIR|ID "
                               "(retain:tokenizer=... for the retain model)")
        say, self.client.say = self.client.say, lambda line: None
        try:
            return self._check()
        finally:
            self.client.say = say

    def _check(self) -> "OpenAIModel":
        try:
            models = self.client.get("/v1/models", timeout=min(self.client.timeout, 15.0), retries=1)
        except ServerError as e:
            if e.status == 0 or e.status in (401, 403):
                raise BackendError(self._why(e)) from None
            models = None  # no model list (transformers serve: 500 without a hub cache): names are checked by use
        ids = [m.get("id") for m in (models or {}).get("data", []) if isinstance(m, dict)]
        served = self._served_arg
        if served is None:
            if len(ids) > 1:
                raise BackendError(f"{self.spec} serves several models ({', '.join(ids)}): pick one with --model-arg served_model=NAME")
            served = ids[0] if ids else None
        elif ids and served not in ids:
            raise BackendError(f"{self.spec} does not serve {served!r} (it serves: {', '.join(ids)}); give one of them: --model-arg served_model=NAME")
        card = next((m for m in (models or {}).get("data", []) if isinstance(m, dict) and m.get("id") == served), {})
        try:
            encoder = self.encoder()
        except Exception as e:  # noqa: BLE001 - a tokenizer that cannot load is the user's input
            raise BackendError(f"tokenizer={self.tokenizer} (--model-arg): cannot load a tokenizer ({type(e).__name__}: {str(e).splitlines()[0][:160]})") from None
        self._server = Server(self.spec, self.client, served, encoder)
        try:
            self._server.detect()  # a served name the server does not list (e.g. empty list) fails here
        except ServerError as e:
            raise BackendError(self._why(e)) from None
        self._server.info = {"owned_by": card.get("owned_by"), "max_model_len": card.get("max_model_len"),
                             "root": card.get("root")}
        self._check_tokenizer(encoder)
        return self

    def _check_tokenizer(self, encoder: Any) -> None:
        local = encoder.encode(PROBE_TEXT, add_special_tokens=True)
        try:
            got = self.client.post("/tokenize", self._server.body({"prompt": PROBE_TEXT}), retries=0)
        except ServerError as e:
            if e.status in (404, 405):
                self._server.info["tokenizer_checked"] = False  # the server cannot tokenize: not checked
                return
            raise BackendError(self._why(e)) from None
        remote = (got or {}).get("tokens")
        self._server.info["tokenizer_checked"] = True
        if isinstance(remote, list) and [int(t) for t in remote] != local:
            raise BackendError(
                f"tokenizer={self.tokenizer} (--model-arg) disagrees with {self.spec}'s tokenizer: {PROBE_TEXT!r} is "
                f"{local[:12]} locally, {remote[:12]} on the server; give the served model's tokenizer")

    def _why(self, e: ServerError) -> str:
        if e.status == 0:
            return f"{self.spec}: no server answers ({e.detail}); is it running and is the URL right?"
        if e.status in (401, 403) and self.client.url.user is not None:
            return (f"{self.spec} answered {e.status} (not authorized): the user and password in the URL were refused "
                    f"({e.detail})")
        if e.status in (401, 403):
            var = self.client.api_key_env
            have = "was refused" if self.client._key else "is not set"
            return f"{self.spec} answered {e.status} (not authorized): the key in ${var} {have}; set it or name another variable with --api-key-env"
        if e.status == 404 and self._served_arg:
            return f"{self.spec} does not serve {self._served_arg!r} ({e.detail}); fix --served-model"
        if e.status == 400 and self._served_arg and ("model" in e.detail.lower()):
            return f"{self.spec} refused model {self._served_arg!r} ({e.detail}); fix --served-model"
        return str(e)  # it names the server already

    # -- identity
    def server(self) -> Server:
        if self._server is None:
            self.check()
        return self._server  # type: ignore[return-value]

    def capabilities(self) -> Capabilities:
        return server_capabilities(self.server())

    def identity(self) -> Identity:
        """The request store's key: every detail of :meth:`server_identity` (the probe as a digest)."""
        ident = self.server_identity()
        details = {k: v for k, v in ident.items() if k != "probe"}
        details["probe"] = hashlib.sha256(json.dumps(ident["probe"], sort_keys=True).encode()).hexdigest()[:16]
        return Identity("openai", "server", tuple(sorted((k, str(v)) for k, v in details.items())))

    def label(self) -> str:
        return self.spec

    def server_identity(self) -> dict:
        """What the fingerprint hashes (and run.json shows): kind, version, model, length, probe."""
        if self._identity is None:
            srv = self.server()
            version = None
            try:
                answer = self.client.get("/version", retries=1)
                version = answer.get("version") if isinstance(answer, dict) else None  # a text page: no version
            except ServerError:
                pass
            ids = self.encoder().encode(PROBE_TEXT, add_special_tokens=True)
            body: dict[str, Any] = {"prompt": srv.prompts([ids]), "max_tokens": PROBE_TOKENS, "temperature": 0,
                                    "logprobs": 0}
            if srv.gen_mode == "ids":
                body.update(return_token_ids=True)
            if srv.logprob_mode == "prompt_logprobs":
                body.update(prompt_logprobs=0)
            if srv.gen_mode == "chat":
                ans = srv.post_chat({"messages": [{"role": "user", "content": PROBE_TEXT}], "max_tokens": PROBE_TOKENS, "temperature": 0})
                ch = (ans.get("choices") or [{}])[0]
                probe: dict = {"text": (ch.get("message") or {}).get("content")}
            else:
                ans = srv.post_completion(body)
                ch = (ans.get("choices") or [{}])[0]
                lps = (ch.get("logprobs") or {}).get("token_logprobs") or []
                plp = ch.get("prompt_logprobs") or []
                probe = {"ids": ch.get("token_ids"), "text": ch.get("text"),
                         "logprobs": [_r(x) for x in lps],
                         "prompt_logprobs": [_r(next(iter(e.values()))["logprob"]) if e else None for e in plp]}
            fp_sys = str(ans.get("system_fingerprint") or "")
            kind = srv.info.get("owned_by") or (fp_sys.split("-")[0] if fp_sys else "openai-compatible")
            self._identity = {"kind": kind, "version": version or fp_sys or None,
                              "served_model": srv.served or ans.get("model"),
                              "max_model_len": srv.info.get("max_model_len"), "dtype": self.dtype, "probe": probe,
                              "logprob_mode": srv.logprob_mode, "gen_mode": srv.gen_mode}
        return self._identity

    def fingerprint(self) -> str:
        if self._fp is None:
            ident = self.server_identity()
            text = json.dumps({**ident, "tokenizer": self.encoder().fingerprint()}, sort_keys=True, default=str)
            # the version: what is stored from a server, and how it is checked (docs/cache.md)
            self._fp = hashlib.sha256(("openai-2\0" + text).encode()).hexdigest()
        return self._fp

    def device_type(self) -> str:
        return "server"

    def describe(self) -> dict:
        """run.json's record of this model: never the key, only the variable's name."""
        out = {"spec": self.spec, "path": self.spec, "source": "openai", "tokenizer": self.tokenizer,
               "api_key_env": self.client.api_key_env, "dtype": self.dtype,
               "settings": self.client.settings.model_dump()}
        if self._identity is not None:
            out.update({k: v for k, v in self._identity.items() if k != "probe"})
        if self._server is not None:
            out.update(logprob_mode=self._server.logprob_mode, gen_mode=self._server.gen_mode,
                       tokenizer_checked=self._server.info.get("tokenizer_checked"))
            out["http_calls"] = self.client.calls
        return out

    # -- halves
    def encoder(self) -> Any:
        if self._encoder is None:
            from transformers import AutoTokenizer  # heavy: only when a tokenizer is needed

            src = str(Path(self.tokenizer).expanduser()) if Path(self.tokenizer).expanduser().is_dir() else self.tokenizer
            tok = AutoTokenizer.from_pretrained(src)
            _ensure_pad(tok)
            self._encoder = HFEncoder(tok)
        return self._encoder

    def load(self) -> Any:
        if self._adapter is None:
            self._adapter = OpenAIAdapter(self.server(), self.encoder(), self.dtype)
        return self._adapter


def _r(x: Any) -> float | None:
    return None if x is None else round(float(x), 3)


def from_spec(target: str, tokenizer: str | None = None, served_model: str | None = None,
              api_key_env: str | None = None, dtype: str | None = None, model_args: dict | None = None,
              **options: Any) -> OpenAIModel:
    """The ``openai`` scheme's factory: ``openai:URL`` plus its qualifiers and ``model_args``
    (``--model-arg KEY=VALUE``: :class:`ServerSettings`), checked at once."""
    try:
        url = parse_url(target)
    except ValueError as e:
        raise BackendError(f"openai:{e}") from None
    if url.user is not None and api_key_env:
        raise BackendError(f"openai:{url.shown}: credentials in the URL and api_key_env={api_key_env} (--model-arg): "
                           "give one (the URL's user info is sent as basic auth, the key as a bearer token)")
    try:
        settings = backend_settings(ServerSettings, model_args, "openai")
    except ValueError as e:
        raise BackendError(str(e)) from None
    return OpenAIModel(target, tokenizer=tokenizer, served=served_model, api_key_env=api_key_env or "OPENAI_API_KEY",
                       dtype=dtype or "auto", settings=settings, **options).check()


#: none of the run's flags: ``dtype`` here states what the server runs (its identity), per model
from_spec.run_flags = ()  # type: ignore[attr-defined]
