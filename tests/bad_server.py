"""A small OpenAI-compatible server on 127.0.0.1 that misbehaves on purpose (standard library only).

It passes evaldag's checks (``/v1/models``, the mode detection, the identity probe: every
completion whose prompts are all the first prompt it saw) and answers the real work the way
``mode`` says: ``ok`` (valid prompt log-probs), ``hang`` (no answer until it is stopped),
``429`` (rate-limited, ``Retry-After: 1``), ``500``, ``huge`` (a body of ``huge_mb`` MB, no
Content-Length), ``notjson`` (an HTML page), ``nested`` (JSON nested 100,000 deep),
``choices`` (one choice too few), ``probe500`` (a 500 to the identity probe, after the
checks passed: a server that fell over between the two). ``auth`` (``"user:pass"``) requires HTTP basic auth on
every route; ``query`` (``"api_key=X"``) requires that query string on every route. Each
request's path is kept in ``paths``.

Used by the server tests (tests/engine/test_openai_faults.py) and the fault campaign
(tests/perf/fault_kinds/server_io.py): it is evaldag's peer, run as a user's server would be.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("ok", "hang", "429", "500", "huge", "notjson", "nested", "choices", "probe500")


class BadServer:
    def __init__(self, mode: str = "ok", auth: str | None = None, query: str | None = None, huge_mb: int = 8):
        assert mode in MODES, mode
        self.mode, self.auth, self.query, self.huge_mb = mode, auth, query, huge_mb
        self.paths: list[str] = []
        self.work_calls = 0
        self._probe: object = None
        self._stop = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "BadServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what to answer: (status, headers, body bytes | None for a streamed huge body)
    def answer(self, method: str, path: str, body: dict | None) -> tuple[int, dict, bytes]:
        route, _, query = path.partition("?")
        if self.query is not None and query != self.query:
            return 401, {}, _json({"error": {"message": f"wrong query {query!r}"}})
        if route == "/v1/models":
            return 200, {}, _json({"data": [{"id": "tiny", "owned_by": "badserver", "max_model_len": 2048}]})
        if route != "/v1/completions" or method != "POST" or not isinstance(body, dict):
            return 404, {}, _json({"detail": "Not Found"})
        prompts = body.get("prompt")
        if self._probe is None:
            self._probe = prompts
        if prompts == self._probe:
            if self.mode == "probe500" and body.get("max_tokens", 1) > 1:
                return 500, {}, _json({"error": {"message": "engine crashed"}})
            return 200, {}, _json(self.probe(body))
        self.work_calls += 1
        if self.mode == "hang":
            self._stop.wait(120)
            return 503, {}, b""
        if self.mode == "429":
            return 429, {"Retry-After": "1"}, _json({"error": {"message": "rate limited"}})
        if self.mode == "500":
            return 500, {}, _json({"error": {"message": "engine crashed"}})
        if self.mode == "huge":
            return 200, {}, None  # streamed by the handler
        if self.mode == "notjson":
            return 200, {"Content-Type": "text/html"}, b"<html><body>502 Bad Gateway</body></html>"
        if self.mode == "nested":
            return 200, {}, b"[" * 100_000 + b"]" * 100_000
        out = self.logprobs(prompts)
        if self.mode == "choices":
            out["choices"] = out["choices"][:-1]
        return 200, {}, _json(out)

    @staticmethod
    def probe(body: dict) -> dict:
        n = len(body["prompt"][0]) if isinstance(body.get("prompt"), list) and body["prompt"] else 1
        ch = {"index": 0, "text": "x" * body.get("max_tokens", 1), "token_ids": [5] * body.get("max_tokens", 1),
              "logprobs": {"token_logprobs": [-1.0] * body.get("max_tokens", 1)}}
        if body.get("prompt_logprobs") is not None:
            ch["prompt_logprobs"] = [None] + [{"5": {"logprob": -1.0, "rank": 1}} for _ in range(n - 1)]
        return {"choices": [ch], "model": "tiny"}

    @staticmethod
    def logprobs(prompts: list) -> dict:
        choices = []
        for i, seq in enumerate(prompts):
            plp = [None] + [{str(t): {"logprob": -0.5, "rank": 1}} for t in seq[1:]]
            choices.append({"index": i, "text": "", "prompt_logprobs": plp})
        return {"choices": choices, "model": "tiny"}


def _json(x: object) -> bytes:
    return json.dumps(x).encode()


def _handler(server: BadServer) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _serve(self, method: str) -> None:
            server.paths.append(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if server.auth is not None:
                want = "Basic " + base64.b64encode(server.auth.encode()).decode()
                if self.headers.get("Authorization") != want:
                    return self._send(401, {}, _json({"error": {"message": "basic auth required"}}))
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            status, headers, out = server.answer(method, self.path, body)
            if out is None:
                return self._stream_huge()
            self._send(status, headers, out)

        def _send(self, status: int, headers: dict, out: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            except OSError:
                pass

        def _stream_huge(self) -> None:
            """A JSON body of ``huge_mb`` MB with no Content-Length: only reading it tells its size."""
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b'{"choices": [{"index": 0, "text": "')
                chunk = b"y" * (1 << 20)
                for _ in range(server.huge_mb):
                    if server._stop.is_set():
                        return
                    self.wfile.write(chunk)
                self.wfile.write(b'"}]}')
            except OSError:
                pass
            self.close_connection = True

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


if __name__ == "__main__":  # python tests/bad_server.py MODE: serve until Ctrl-C
    import sys

    with BadServer(sys.argv[1] if len(sys.argv) > 1 else "ok") as s:
        print(s.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
