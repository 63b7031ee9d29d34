"""The OpenAI-compatible backend's HTTP side against a scripted stdlib server (no real model):
retries with backoff on 429/5xx, the per-request timeout, the key kept out of every message,
and the one-line errors of item 8 (unknown scheme, unreachable URL, 401, unknown served model).
The same paths against a real vLLM server are in test_openai_vllm.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evaldag.engine.adapters import spec
from evaldag.engine.adapters.openai.openai_http import Client, ServerError
from evaldag.engine.adapters.openai.openai_model import BackendError, OpenAIModel

KEY = "sk-test-5f3c9a1e77-secret"


class Script:
    """Answers per path: a list of (status, body, delay) consumed in order, the last repeated."""

    def __init__(self, routes):
        self.routes = {k: list(v) for k, v in routes.items()}
        self.seen: list[tuple[str, str, dict]] = []


def serve(script: Script):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _answer(self, method):
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else None
            script.seen.append((method, self.path, dict(self.headers), body))
            steps = script.routes.get(self.path)
            if not steps:
                status, out, delay = 404, {"detail": "Not Found"}, 0
            else:
                status, out, delay = steps[0] if len(steps) == 1 else steps.pop(0)
            if delay:
                time.sleep(delay)
            raw = json.dumps(out).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except OSError:
                pass

        def do_GET(self):
            self._answer("GET")

        def do_POST(self):
            self._answer("POST")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def stub():
    servers = []

    def make(routes):
        script = Script(routes)
        httpd, url = serve(script)
        servers.append(httpd)
        return script, url

    yield make
    for s in servers:
        s.shutdown()


def test_retries_429_and_5xx_with_backoff_then_succeeds(stub):
    script, url = stub({"/v1/x": [(429, {"error": {"message": "slow down"}}, 0), (503, {}, 0), (200, {"ok": 1}, 0)]})
    c = Client(url, backoff=0.05)
    t0 = time.monotonic()
    assert c.post("/v1/x", {"a": 1}) == {"ok": 1}
    assert c.calls == 3 and len(script.seen) == 3
    assert time.monotonic() - t0 >= 0.05 + 0.1  # backoff doubled: 0.05 then 0.1 s


def test_a_400_is_not_retried_and_names_the_servers_message(stub):
    script, url = stub({"/v1/x": [(400, {"error": {"message": "prompt too long"}}, 0)]})
    with pytest.raises(ServerError) as e:
        Client(url, backoff=0.01).post("/v1/x", {})
    assert e.value.status == 400 and "prompt too long" in str(e.value) and len(script.seen) == 1


def test_per_request_timeout_is_retried_then_fails(stub):
    script, url = stub({"/v1/x": [(200, {"ok": 1}, 1.0)]})
    c = Client(url, timeout=0.2, retries=1, backoff=0.01)
    with pytest.raises(ServerError) as e:
        c.post("/v1/x", {})
    assert e.value.status == 0 and "no answer" in str(e.value) and c.calls == 2


def test_key_goes_in_the_header_only_and_a_server_echoing_it_is_redacted(stub, monkeypatch):
    monkeypatch.setenv("MY_KEY", KEY)
    script, url = stub({"/v1/models": [(401, {"error": {"message": f"bad key {KEY}"}}, 0)]})
    with pytest.raises(BackendError) as e:
        OpenAIModel(url, tokenizer="unused", api_key_env="MY_KEY").check()
    msg = str(e.value)
    assert KEY not in msg and "\n" not in msg
    assert msg == f"openai:{url} answered 401 (not authorized): the key in $MY_KEY was refused; set it or name another variable with --api-key-env"
    assert script.seen[0][2]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(OpenAIModel(url, api_key_env="MY_KEY").client)


def test_401_without_a_key_says_the_variable_is_not_set(stub, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _, url = stub({"/v1/models": [(401, {"error": {"message": "no key"}}, 0)]})
    with pytest.raises(BackendError, match=r"the key in \$OPENAI_API_KEY is not set"):
        OpenAIModel(url, tokenizer="unused").check()


def test_unreachable_url_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(BackendError) as e:
        spec.resolve(f"openai:http://127.0.0.1:{port}/v1", tokenizer="unused")
    msg = str(e.value)
    assert msg.startswith(f"openai:http://127.0.0.1:{port}/v1: no server answers ([Errno 111] Connection refused)") and "\n" not in msg
    assert msg.endswith("is it running and is the URL right?")


def test_served_model_not_on_the_server(stub):
    _, url = stub({"/v1/models": [(200, {"data": [{"id": "llama-a"}, {"id": "llama-b"}]}, 0)]})
    with pytest.raises(BackendError) as e:
        OpenAIModel(url, tokenizer="unused", served="nope").check()
    assert str(e.value) == f"openai:{url} does not serve 'nope' (it serves: llama-a, llama-b); give one of them: --model-arg served_model=NAME"
    with pytest.raises(BackendError, match=r"serves several models \(llama-a, llama-b\): pick one with --model-arg served_model=NAME"):
        OpenAIModel(url, tokenizer="unused").check()


def test_openai_spec_needs_a_tokenizer_and_an_http_url():
    with pytest.raises(BackendError, match=r"needs a local tokenizer that builds the prompts: --model-arg tokenizer=DIR\|ID"):
        spec.resolve("openai:http://127.0.0.1:9/v1")
    with pytest.raises(BackendError, match="must be an http:// or https:// URL"):
        spec.resolve("openai:localhost:8000", tokenizer="t")


def test_unknown_scheme_and_schemes_are_never_paths():
    with pytest.raises(spec.SpecError) as e:
        spec.resolve("vlm:/models/x")
    assert str(e.value).startswith("--model vlm:/models/x: unknown model scheme 'vlm'; known: ")
    assert "hf:" in str(e.value) and "openai:" in str(e.value)
    with pytest.raises(spec.SpecError, match=r"unknown model scheme 'http' \(an OpenAI-compatible server is openai:URL\)"):
        spec.resolve("http://h:8000/v1")
    assert spec.parse("./ckpt").scheme == "hf" and spec.parse("org/name").scheme == "hf"
    assert spec.parse("openai:http://[::1]:8000/v1?x=1").target == "http://[::1]:8000/v1?x=1"
    assert spec.has_scheme("openai:http://h/v1?a=[1]") and not spec.has_scheme("ckpt-*")
    assert not spec.has_scheme("C:\\models\\x")


def test_the_deadline_bounds_one_call_with_its_retries_and_says_the_last_status(stub):
    script, url = stub({"/v1/x": [(200, {"ok": 1}, 2.0)]})
    said = []
    c = Client(url, retries=5, timeout=5, deadline=0.6, backoff=0.01, say=said.append)
    t0 = time.monotonic()
    with pytest.raises(ServerError) as e:
        c.post("/v1/x", {})
    assert time.monotonic() - t0 < 1.5 and e.value.status == 0
    assert str(e.value) == (f"openai:{url}: POST /v1/x: gave up at the deadline of 0.6 s after 1 try (last: no answer: "
                            "timed out); more time: --model-arg deadline=SECONDS")
    assert said == []  # nothing was retried: the deadline cut the first try short


def test_retry_lines_are_said_at_most_once_a_second_and_count_the_others(stub):
    script, url = stub({"/v1/x": [(503, {"detail": "busy"}, 0)] * 3 + [(200, {"ok": 1}, 0)]})
    said = []
    assert Client(url, backoff=0.01, say=said.append).post("/v1/x", {}) == {"ok": 1}
    assert said == [f"evaldag: openai:{url}: POST /v1/x answered 503: busy: retrying in 0.01 s (try 2 of 5)"]
