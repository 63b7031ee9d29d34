"""A tiny numpy language model: the engine's own stand-in for a real checkpoint.

A character-level bigram model with fixed random weights. It implements the full
adapter interface (fingerprint, encoder, load, run_batch for TokenStats and Generate),
so the engine, its tests and the toy graph run without torch, in milliseconds, with
real numbers: log-probs, argmaxes and greedy generations are exact and reproducible.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from ..requests import Generate, GenerateResult, Request, TokenStats, TokenStatsResult
from ..backend import Capabilities, Identity, ModelAdapter, ModelResource
from .base import Encoded, PromptTemplate

# No full vocabulary statistics are withheld: a toy model gives every token-statistic field.
TOY_CAPABILITIES = Capabilities(frozenset({"token_stats", "generate"}), frozenset({"logprob", "argmax", "mu", "var"}))

ALPHABET = "\x00\x01 abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;?!'\"-\n"
BOS, EOS = 0, 1


class ToyEncoder:
    """Characters are tokens; id 0 is bos, id 1 is eos; unknown characters map to space."""

    eos_token = "\x01"
    eos_token_id = EOS
    pad_token_id = EOS

    def __init__(self) -> None:
        self.index = {c: i for i, c in enumerate(ALPHABET)}

    def fingerprint(self) -> str:
        return hashlib.sha256(ALPHABET.encode()).hexdigest()

    def _ids(self, text: str) -> list[int]:
        return [self.index.get(c, 2) for c in text]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Text -> ids; ``add_special_tokens`` puts the bos in front, as a Llama tokenizer does."""
        return ([BOS] if add_special_tokens else []) + self._ids(text)

    def encode_qa(self, question: str, answer: str, template: PromptTemplate, fewshot: Sequence[tuple[str, str]] = (), joint: bool = False, max_length: int = 512,
                  answer_only: bool = False) -> Encoded:
        t = template
        prompt = "".join(f"{t.user_start_tag}{q}{t.user_end_tag}{t.asst_start_tag}{a}{t.asst_end_tag}" for q, a in fewshot)
        prompt += f"{t.user_start_tag}{question}{t.user_end_tag}{t.asst_start_tag}"
        p = [BOS] + self._ids(prompt)
        return Encoded(context_ids=tuple(p), continuation_ids=tuple(self._ids(answer) + ([] if answer_only else [EOS])),
                       prompt_ids=tuple(p))

    def encode_completion(self, prefix: str, text: str, insert_space: bool = False, max_length: int = 2048) -> Encoded:
        p = [BOS] + self._ids(prefix)
        c = self._ids((" " if insert_space else "") + text)
        return Encoded(context_ids=tuple(p), continuation_ids=tuple(c[:max_length]), prompt_ids=tuple(p),
                       truncated=max(0, len(c) - max_length))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, clean_up_tokenization_spaces: bool = False) -> str:
        return "".join(ALPHABET[i] for i in ids if not (skip_special_tokens and i in (BOS, EOS)))


class ToyAdapter(ModelAdapter):
    """The "weights": a fixed random bigram table. Counts every sequence it forwards."""

    device = "cpu"

    def capabilities(self) -> Capabilities:
        return TOY_CAPABILITIES

    def __init__(self, seed: int, sharpness: float):
        rng = np.random.default_rng(seed)
        logits = rng.normal(0.0, sharpness, size=(len(ALPHABET), len(ALPHABET)))
        self.logp = (logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)).astype(np.float64)
        self.forwarded = 0

    def _stats(self, r: TokenStats) -> TokenStatsResult:
        seq = list(r.context_ids) + list(r.continuation_ids)
        n0 = len(r.context_ids)
        prev = np.asarray(seq[n0 - 1 : -1])
        tgt = np.asarray(seq[n0:])
        lp = self.logp[prev]  # [n, V]
        p = np.exp(lp)
        mu = (p * lp).sum(1)
        var = (p * lp * lp).sum(1) - mu**2
        return TokenStatsResult(
            lp[np.arange(len(tgt)), tgt].astype(np.float32), lp.argmax(1).astype(np.int32), mu.astype(np.float32), var.astype(np.float32)
        )

    def _generate(self, r: Generate) -> GenerateResult:
        s = r.settings
        rng = np.random.default_rng(s.seed) if s.do_sample else None
        out: list[int] = []
        last = r.prompt_ids[-1]
        text = ""
        for _ in range(s.max_new_tokens):
            row = self.logp[last]
            nxt = int(rng.choice(len(row), p=np.exp(row) / np.exp(row).sum())) if rng is not None else int(row.argmax())
            out.append(nxt)
            if nxt == EOS:
                break
            text += ALPHABET[nxt] if nxt != BOS else ""
            if any(stop in text for stop in s.stop_strings):
                break
            last = nxt
        return GenerateResult(np.asarray(out, dtype=np.int32), text)

    def run_batch(self, requests: Sequence[Request]) -> list:
        self.forwarded += len(requests)
        out = []
        for r in requests:
            if isinstance(r, TokenStats):
                out.append(self._stats(r))
            elif isinstance(r, Generate):
                out.append(self._generate(r))
            else:
                raise NotImplementedError(f"the toy model cannot serve {r.kind} requests")
        return out


class ToyModel(ModelResource):
    """A model resource: fingerprint from (seed, sharpness), weights built on ``load()``."""

    kind = "model"

    def __init__(self, seed: int = 0, sharpness: float = 2.0):
        self.seed = seed
        self.sharpness = sharpness
        self.loads = 0
        self.adapter: ToyAdapter | None = None

    backend = "toy"

    def capabilities(self) -> Capabilities:
        return TOY_CAPABILITIES

    def identity(self) -> Identity:
        return Identity("toy", "cpu", in_fingerprint=True)  # the key it always had: fp@cpu

    def fingerprint(self) -> str:
        return hashlib.sha256(f"toy-bigram|{self.seed}|{self.sharpness}|{ALPHABET}".encode()).hexdigest()

    def encoder(self) -> ToyEncoder:
        return ToyEncoder()

    def load(self) -> ToyAdapter:
        self.loads += 1
        self.adapter = ToyAdapter(self.seed, self.sharpness)
        return self.adapter

    def describe(self) -> dict:
        return {"type": "toy-bigram", "seed": self.seed}

    def label(self) -> str:
        return f"toy:{self.seed}"


def from_spec(target: str = "0") -> ToyModel:
    """``toy:SEED`` (the ``evaldag.backends`` factory)."""
    try:
        return ToyModel(seed=int(target or 0))
    except ValueError:
        raise ValueError(f"toy:{target}: the toy backend takes an integer seed") from None
