"""A small OpenAI-compatible server of the tests' own, on 127.0.0.1, whose answers can be wrong.

It serves ``/v1/completions`` from the tiny Llama fixture (``tests/fixtures/tiny-llama/target``)
the way vLLM does: token-id prompts, ``prompt_logprobs`` (or, in echo mode, ``echo`` +
``logprobs`` with ``token_id:N`` tokens), greedy generation. Honest, its numbers are the
model's own log-softmax in float32, the numbers the ``hf`` backend computes. ``fault`` then
breaks the answers to the evaluation's prompts (never the fixed probe the client
fingerprints the server by, so a broken server keeps its identity, as a real one would):

* ``nan``, ``inf``, ``-inf``, ``positive`` (``3.0``), ``null``: one prompt log-prob in three
  prompts, written as JSON's ``NaN``/``Infinity``/``-Infinity``/``3.0``/``null``;
* ``rank0``: a rank 0; ``short``: one ``prompt_logprobs`` entry missing;
* ``echo_shift``: echo mode through a template that adds one token before the prompt;
  ``echo_swap``: echo mode through a template that replaces the prompt's first token.

It is evaldag's peer under test, not a mock of evaldag: the CLI talks to it over HTTP.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tiny-llama" / "target"
PROBE_TEXT = "The capital of France is"  # engine/adapters/openai/openai_model.py's probe: always answered honestly
FAULTS = ("honest", "nan", "inf", "-inf", "positive", "null", "rank0", "short", "echo", "echo_shift", "echo_swap")
_BAD = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "positive": 3.0, "null": None}


class AnswerServer:
    """``AnswerServer(fault)``: ``.url`` (add ``/v1``), ``.fault`` (may change between runs), ``.stop()``."""

    def __init__(self, fault: str = "honest", model_dir: Path = FIXTURE):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        assert fault in FAULTS, fault
        self.fault = fault
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.probe = self.tok.encode(PROBE_TEXT, add_special_tokens=True)
        self.lock = threading.Lock()
        self.calls = 0
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status: int, out: object) -> None:
                raw = json.dumps(out).encode()  # allow_nan: NaN/Infinity go out as a sloppy server writes them
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, {"data": [{"id": "tiny", "owned_by": "answer-server", "max_model_len": 1024}]})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else {}
                if self.path != "/v1/completions":
                    return self._send(404, {"detail": "Not Found"})
                status, out = srv.complete(body)
                self._send(status, out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the model
    def logp(self, ids: list[int]):
        import torch

        with self.lock, torch.no_grad():
            logits = self.model(torch.tensor([ids])).logits[0].float()
            return torch.log_softmax(logits, dim=-1)

    def greedy(self, ids: list[int], n: int) -> list[int]:
        out = list(ids)
        for _ in range(n):
            nxt = int(self.logp(out)[-1].argmax())
            out.append(nxt)
            if nxt == self.tok.eos_token_id:
                break
        return out[len(ids):]

    # -- the answers
    def echo_mode(self) -> bool:
        return self.fault.startswith("echo")

    def complete(self, body: dict) -> tuple[int, dict]:
        self.calls += 1
        prompts = body.get("prompt")
        if not (isinstance(prompts, list) and prompts and all(isinstance(p, list) for p in prompts)):
            return 400, {"detail": "this server takes token-id prompts only"}
        if body.get("prompt_logprobs") is not None and self.echo_mode():
            return 400, {"detail": "prompt_logprobs is not supported"}
        choices, used = [], 0
        for i, ids in enumerate(prompts):
            honest = ids == self.probe or i % 3 != 0
            if body.get("echo"):
                ch, n = self._echo(ids, body, honest)
            else:
                ch, n = self._plain(ids, body, honest)
            choices.append({"index": i, **ch})
            used += n
        return 200, {"id": "cmpl-test", "object": "text_completion", "model": "tiny", "choices": choices,
                     "usage": {"prompt_tokens": used}}

    def _plain(self, ids: list[int], body: dict, honest: bool) -> tuple[dict, int]:
        new = self.greedy(ids, int(body.get("max_tokens") or 1))
        ch: dict = {"text": self.tok.decode(new), "token_ids": new if body.get("return_token_ids") else None,
                    "finish_reason": "length"}
        if body.get("logprobs") is not None:
            lp = self.logp(ids + new)
            ch["logprobs"] = {"token_logprobs": [float(lp[len(ids) + j - 1, t]) for j, t in enumerate(new)],
                              "tokens": [f"token_id:{t}" for t in new]}
        if body.get("prompt_logprobs") is not None:
            lp = self.logp(ids)
            plp: list = [None]
            for pos in range(1, len(ids)):
                row, t = lp[pos - 1], ids[pos]
                top = int(row.argmax())
                entry = {str(t): {"logprob": float(row[t]), "rank": int((row > row[t]).sum()) + 1}}
                entry[str(top)] = {"logprob": float(row[top]), "rank": 1}
                plp.append(entry)
            if not honest and self.fault in _BAD:
                plp[-1][str(ids[-1])]["logprob"] = _BAD[self.fault]
            elif not honest and self.fault == "rank0":
                plp[-1][str(ids[-1])]["rank"] = 0
            elif not honest and self.fault == "short":
                plp = plp[:-1]
            ch["prompt_logprobs"] = plp
        return ch, len(ids)

    def _echo(self, ids: list[int], body: dict, honest: bool) -> tuple[dict, int]:
        seen = list(ids)
        if not honest and self.fault == "echo_shift":
            seen = [self.tok.bos_token_id, *ids]  # the template adds a token before the prompt
        elif not honest and self.fault == "echo_swap":
            seen = [self.tok.eos_token_id, *ids[1:]]  # the template replaces the prompt's first token
        new = self.greedy(seen, int(body.get("max_tokens") or 1))
        full = seen + new
        lp = self.logp(full)
        token_lp: list = [None] + [float(lp[p - 1, full[p]]) for p in range(1, len(full))]
        tops: list = [None] + [{f"token_id:{int(lp[p - 1].argmax())}": float(lp[p - 1].max())} for p in range(1, len(full))]
        return {"text": self.tok.decode(full), "finish_reason": "length",
                "logprobs": {"tokens": [f"token_id:{t}" for t in full], "token_logprobs": token_lp,
                             "top_logprobs": tops}}, len(seen)


def plant_nan(cache: Path, every: int = 4) -> int:
    """Make one stored token-statistics answer in ``every`` NaN in the request store of the
    cache folder ``cache``, as an evaldag that did not check answers stored them; how many."""
    import numpy as np

    from evaldag.engine.cache import Cache

    store, n = Cache(cache).requests, 0
    for model in store.models():
        keys = [k for (k,) in store._db().execute("SELECT key FROM results WHERE model=? AND kind='token_stats'",
                                                   [model]).fetchall()]
        found = store.get_many(model, keys)
        for res in list(found.values())[::every]:
            res.logprob = res.logprob.copy()
            res.logprob[-1] = np.nan
            n += 1
        store.put_many(model, [(k, "token_stats", r) for k, r in found.items()])
    store.close()
    return n
