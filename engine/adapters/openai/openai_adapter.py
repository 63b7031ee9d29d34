"""Serving requests from an OpenAI-compatible server (vLLM, SGLang, transformers serve, an API).

What a server can give is detected once (``openai_model.Server.detect``) and decides
the route of each request kind:

* ``token_stats``: ``prompt_logprobs=1`` on ``/v1/completions`` (vLLM, SGLang) gives
  for every prompt token its log-prob and rank, plus the top-1 token: the target's
  log-prob and the argmax the metrics need. Otherwise ``echo`` + ``logprobs=1`` (the
  legacy OpenAI completions API) gives the same two numbers, once the echoed tokens are
  checked to be the prompt's. The full-vocabulary mean and variance (Min-K%++) cannot be
  had from either: they are not available (``None``, never a NaN placeholder) and the
  planner refuses the metrics that need them (or sends them to ``--fallback``).
  Each number is read with ``answers.number``/``answers.rank`` (``null`` is one line) and
  every answer checked by the executor (``engine/answers.py``) before it is stored.
* ``generate``: ``/v1/completions`` with the token ids as the prompt where the server
  takes ids (vLLM, SGLang), with the decoded text otherwise; ``/v1/chat/completions``
  for a chat-only endpoint. The new ids come back with ``return_token_ids`` (vLLM) or
  are re-encoded locally; the text is decoded locally from the ids, exactly as the
  Hugging Face backend decodes, so the two backends' texts compare.

Many prompts go in one call where that changes nothing (teacher forcing, greedy
generation); a seeded sampled request goes alone so its seed alone decides its draw.
Calls run ``concurrency`` at a time (``openai_http.Client.map``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...answers import BadAnswer, number, rank
from ...backend import Capabilities, ModelAdapter
from ...batching import Budget
from ...requests import Generate, GenerateResult, Request, TokenStats, TokenStatsResult
from .openai_http import ServerError, chunks

PROMPTS_PER_CALL = 16
SERVER_GROUP = Budget(tokens=1 << 16, max_batch=256)


def server_capabilities(server: Any) -> Capabilities:
    """What the detected server modes give: generation always; token statistics (the
    chosen token's log-prob and the greedy token) with prompt_logprobs or echo."""
    if server.logprob_mode in ("prompt_logprobs", "echo"):
        return Capabilities(frozenset({"token_stats", "generate", "generate_text"}), frozenset({"logprob", "argmax"}))
    return Capabilities(frozenset({"generate", "generate_text"}))


class OpenAIAdapter(ModelAdapter):
    """The weights side of a server-backed model: what the executor calls with a batch."""

    device = "server"

    def __init__(self, server: Any, encoder: Any, dtype: str = ""):
        self.server = server  # openai_model.Server: client, served model id, detected modes
        self.encoder = encoder
        self.dtype = dtype
        self._tokens: tuple[int, int] | None = None

    def capabilities(self) -> Capabilities:
        return server_capabilities(self.server)

    def group_budget(self, kind: str, budget: Budget) -> Budget:
        """The server batches on its own: hand it many requests at once (calls then run
        ``concurrency`` at a time), never less than the executor's own budget."""
        return Budget(max(budget.tokens, SERVER_GROUP.tokens), max(budget.max_batch, SERVER_GROUP.max_batch))

    def tokens_used(self) -> tuple[int, int] | None:
        return self._tokens

    def run_batch(self, requests: Sequence[Request]) -> list[Any]:
        if not requests:
            return []
        kind = requests[0].kind
        n = sum(r.length() for r in requests)
        self._tokens = (n, n)  # a server batches on its own: nothing padded here
        if kind == "token_stats":
            return self._token_stats(list(requests))  # type: ignore[arg-type]
        if kind == "generate":
            return self._generate(list(requests))  # type: ignore[arg-type]
        if kind == "generate_text":
            return self.server.client.map(self._generate_text, list(requests))
        raise ServerError(f"{self.server.spec} cannot serve {kind} requests (a server gives log-probs and generations only)")

    # -- token statistics
    def _token_stats(self, reqs: list[TokenStats]) -> list[TokenStatsResult]:
        for r in reqs:
            if not r.context_ids:
                raise ServerError(f"{self.server.spec}: a server gives no log-prob for the first prompt token; "
                                  "a token_stats request needs a non-empty context (a bos token)")
        mode = self.server.logprob_mode
        if mode == "prompt_logprobs":
            fn = self._stats_prompt_logprobs
        elif mode == "echo":
            fn = self._stats_echo
        else:
            raise ServerError(f"{self.server.spec} gives no prompt log-probs (neither prompt_logprobs nor echo+logprobs)")
        groups = list(chunks(reqs, PROMPTS_PER_CALL if self.server.gen_mode == "ids" else 1))
        out: list[TokenStatsResult] = []
        for part in self.server.client.map(fn, groups):
            out.extend(part)
        return out

    def _stats_prompt_logprobs(self, reqs: Sequence[TokenStats]) -> list[TokenStatsResult]:
        seqs = [list(r.context_ids) + list(r.continuation_ids) for r in reqs]
        body = {"prompt": seqs, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}
        choices = self._choices(self.server.post_completion(body), len(reqs))
        out = []
        for r, seq, ch in zip(reqs, seqs, choices):
            plp = ch.get("prompt_logprobs")
            if not isinstance(plp, list) or len(plp) != len(seq):
                got = f"{len(plp)} prompt log-probs" if isinstance(plp, list) else "no prompt log-probs"
                raise BadAnswer(f"{self.server.spec}: {got} for a {len(seq)}-token prompt")
            lp, am = [], []
            for pos in range(len(r.context_ids), len(seq)):
                where = f"{self.server.spec}: the prompt log-prob at position {pos}"
                entry = plp[pos] if isinstance(plp[pos], dict) else {}
                target = entry.get(str(seq[pos]))
                if not isinstance(target, dict):
                    raise ServerError(f"{self.server.spec}: no log-prob for prompt token {seq[pos]} at position {pos}")
                lp.append(number(target.get("logprob"), where))
                cands = {_prompt_id(k, where): v for k, v in entry.items() if isinstance(v, dict)}
                ranks = {t: rank(v["rank"], f"{where}, token id {t},") for t, v in cands.items() if "rank" in v}
                top = [t for t, k in ranks.items() if k == 1]
                am.append(top[0] if top else max(cands, key=lambda t: number(cands[t].get("logprob"), where)))
            out.append(_stats(lp, am))
        return out

    def _stats_echo(self, reqs: Sequence[TokenStats]) -> list[TokenStatsResult]:
        """``echo`` gives the prompt's tokens back with their log-probs, then the one new token:
        the answer is read only when its first tokens are exactly the prompt's (a server whose
        template adds a token would shift every position by one)."""
        seqs = [list(r.context_ids) + list(r.continuation_ids) for r in reqs]
        body = {"prompt": self.server.prompts(seqs), "max_tokens": 1, "temperature": 0, "echo": True,
                "logprobs": 1, "return_tokens_as_token_ids": True}
        answer = self.server.post_completion(body)
        choices = self._choices(answer, len(reqs))
        said = ((answer or {}).get("usage") or {}).get("prompt_tokens")
        if isinstance(said, int) and not isinstance(said, bool) and said != sum(len(s) for s in seqs):
            raise BadAnswer(f"{self.server.spec}: echo counted {said} prompt tokens for prompts of "
                            f"{sum(len(s) for s in seqs)}; its template changes the prompt, so no position can be trusted")
        out = []
        for r, seq, ch in zip(reqs, seqs, choices):
            lps = ch.get("logprobs") if isinstance(ch.get("logprobs"), dict) else {}
            tokens, token_lp, tops = lps.get("tokens"), lps.get("token_logprobs"), lps.get("top_logprobs") or []
            if not isinstance(token_lp, list) or not isinstance(tokens, list) or not isinstance(tops, list):
                raise BadAnswer(f"{self.server.spec}: echo gave no tokens and log-probs to check against the prompt")
            if not (len(seq) <= len(token_lp) <= len(seq) + 1 and len(tokens) == len(token_lp)):
                raise BadAnswer(f"{self.server.spec}: echo gave {len(token_lp)} log-probs for a {len(seq)}-token "
                                "prompt and one new token; its template changes the prompt, so no position can be trusted")
            for pos, tid in enumerate(seq):
                if not self._same_token(tokens[pos], tid):
                    raise BadAnswer(f"{self.server.spec}: echo gave token {str(tokens[pos])[:40]!r} at position {pos} "
                                    f"where the prompt has token {tid}; its positions cannot be trusted")
            lp, am = [], []
            for pos in range(len(r.context_ids), len(seq)):
                where = f"{self.server.spec}: the echoed log-prob at position {pos}"
                lp.append(number(token_lp[pos], where))
                top = tops[pos] if pos < len(tops) and isinstance(tops[pos], dict) else {}
                best = max(top, key=lambda k: number(top[k], where)) if top else None
                am.append(_token_id(best, self.encoder) if best is not None else -1)
            out.append(_stats(lp, am))
        return out

    def _same_token(self, token: Any, tid: int) -> bool:
        """An echoed token is prompt token ``tid``: ``token_id:N`` (vLLM), or the token's text."""
        if not isinstance(token, str):
            return False
        if token.startswith("token_id:"):
            return token[len("token_id:"):].strip() == str(tid)
        tok = getattr(self.encoder, "tokenizer", None)
        forms = {self.encoder.decode([tid], skip_special_tokens=False)}
        if tok is not None and hasattr(tok, "convert_ids_to_tokens"):
            forms.add(tok.convert_ids_to_tokens(tid))
        return token in forms

    # -- generation
    def _generate(self, reqs: list[Generate]) -> list[GenerateResult]:
        greedy = [i for i, r in enumerate(reqs) if not r.settings.do_sample]
        calls: list[list[int]] = []
        by_settings: dict[Any, list[int]] = {}
        for i in greedy:
            by_settings.setdefault(reqs[i].settings, []).append(i)
        for idx in by_settings.values():
            calls.extend(list(c) for c in chunks(idx, PROMPTS_PER_CALL))
        calls.extend([i] for i, r in enumerate(reqs) if r.settings.do_sample)
        if self.server.gen_mode != "ids":
            calls = [[i] for c in calls for i in c]  # a text prompt (transformers serve) or a chat goes alone
        out: list[Any] = [None] * len(reqs)
        for idx, results in zip(calls, self.server.client.map(lambda c: self._generate_call([reqs[i] for i in c]), calls)):
            for i, res in zip(idx, results):
                out[i] = res
        return out

    def _generate_call(self, reqs: list[Generate]) -> list[GenerateResult]:
        s = reqs[0].settings
        body = _sampling_body(s)
        if self.server.gen_mode == "chat":
            body["messages"] = [{"role": "user", "content": self._text(reqs[0].prompt_ids)}]
            answer = self.server.post_chat(body)
            texts = [(answer.get("choices") or [{}])[0].get("message", {}).get("content") or ""]
            return [self._from_text(t, s) for t in texts]
        body["prompt"] = self.server.prompts([list(r.prompt_ids) for r in reqs])
        if self.server.gen_mode == "ids":
            body["return_token_ids"] = True
        choices = self._choices(self.server.post_completion(body), len(reqs))
        out = []
        for ch in choices:
            ids = ch.get("token_ids")
            if isinstance(ids, list):
                out.append(self._from_ids([int(t) for t in ids], s))
            else:
                out.append(self._from_text(ch.get("text") or "", s))
        return out

    def _generate_text(self, r: Any) -> GenerateResult:
        """A prompt given as text (``GenerateText``): the chat endpoint's user turn, or the
        completion prompt as is; the text comes back as the server wrote it."""
        s = r.settings
        body = _sampling_body(s)
        if self.server.gen_mode == "chat":
            answer = self.server.post_chat({**body, "messages": [{"role": "user", "content": r.prompt}]})
            text = (answer.get("choices") or [{}])[0].get("message", {}).get("content") or ""
        else:
            answer = self.server.post_completion({**body, "prompt": r.prompt})
            text = self._choices(answer, 1)[0].get("text") or ""
        return GenerateResult(np.zeros(0, dtype=np.int32), text)

    def _from_ids(self, ids: list[int], s: Any) -> GenerateResult:
        ids = ids[: s.max_new_tokens]
        text = self.encoder.decode(ids, skip_special_tokens=True)
        return GenerateResult(np.asarray(ids, dtype=np.int32), text)

    def _from_text(self, text: str, s: Any) -> GenerateResult:
        ids = self.encoder.encode(text, add_special_tokens=False)[: s.max_new_tokens]
        return GenerateResult(np.asarray(ids, dtype=np.int32), text)

    def _text(self, ids: Sequence[int]) -> str:
        return self.server.prompt_text(list(ids))

    def _choices(self, answer: Any, n: int) -> list[dict]:
        choices = sorted((answer or {}).get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != n:
            raise ServerError(f"{self.server.spec}: {len(choices)} choices for {n} prompts in one call")
        return choices


def _stats(lp: list[float], am: list[int]) -> TokenStatsResult:
    """The two numbers a server gives; the full-vocabulary statistics are not available (None)."""
    return TokenStatsResult(np.asarray(lp, dtype=np.float32), np.asarray(am, dtype=np.int32), None, None)


def _prompt_id(key: Any, where: str) -> int:
    """A ``prompt_logprobs`` key: a token id as a string."""
    try:
        return int(key)
    except (TypeError, ValueError):
        raise BadAnswer(f"{where} names token {str(key)[:40]!r}, not a token id") from None


def _token_id(token: str, encoder: Any) -> int:
    """A ``top_logprobs`` key as an id: ``token_id:N`` (vLLM with return_tokens_as_token_ids),
    else the local tokenizer's id of that token string (-1 when it has none)."""
    if token.startswith("token_id:"):
        return int(token.split(":", 1)[1])
    ids = encoder.encode(token, add_special_tokens=False)
    return int(ids[0]) if len(ids) == 1 else -1


def _sampling_body(s: Any) -> dict[str, Any]:
    """The request body's generation settings: greedy is temperature 0; sampling sends its seed
    and top-p; stop strings stay in the text (vLLM drops them otherwise) so they are cut locally."""
    body: dict[str, Any] = {"max_tokens": s.max_new_tokens, "temperature": s.temperature if s.do_sample else 0}
    if s.do_sample:
        body.update(seed=int(s.seed), top_p=s.top_p, **({"top_k": s.top_k} if getattr(s, "top_k", 0) else {}))
    if s.stop_strings:
        body.update(stop=list(s.stop_strings), include_stop_str_in_output=True)
    return body
