"""Perplexity with HF's sliding-window recipe ("Perplexity of fixed-length models").

The texts are joined with ``"\\n\\n"`` and tokenized once (special tokens included, as
``tokenizer(text)`` does). Windows of ``max_length`` tokens start every ``stride``
tokens; each scores only its last ``trg_len = end - prev_end`` tokens, the rest is
context. The recipe weights each window's mean NLL by ``num_valid_tokens - 1`` ("due to
internal label shift"): exact for the first window, one token short for every later one
(there all ``trg_len`` targets are scored). ``weighting="hf"`` (default) keeps that
quirk, ``"exact"`` weights by the tokens actually scored. PPL = exp(weighted mean NLL).

``per_text=True`` runs the recipe on each text alone and reports the mean of the
per-text perplexities (lm-debugger averages per-sentence perplexities the same way).
``perplexity_change`` is its own node: edited minus original, with both values.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from ...engine import Params, Result, TokenStats, metric
from .prompts import encode


class PerplexityParams(Params):
    max_length: int = 1024
    stride: int = 512
    join: str = "\n\n"
    per_text: bool = False
    weighting: Literal["hf", "exact"] = "hf"


def windows(ids: tuple[int, ...], max_length: int, stride: int) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """HF's loop as (context, scored continuation, the recipe's token weight) per window."""
    if max_length < 2 or not 1 <= stride <= max_length:
        raise ValueError(f"perplexity: need max_length >= 2 and 1 <= stride <= max_length (got {max_length}, {stride})")
    out, prev_end, n = [], 0, len(ids)
    for begin in range(0, n, stride):
        end = min(begin + max_length, n)
        trg_len = end - prev_end
        window = ids[begin:end]
        k = max(len(window) - trg_len, 1)  # the first token of the text has no prediction
        if len(window) > k:
            out.append((window[:k], window[k:], trg_len - 1))
        prev_end = end
        if end == n:
            break
    return out


def _ppl(got: list, wins: list, weighting: str) -> float:
    nll_sum, n_tokens = 0.0, 0
    for res, (_, cont, hf_weight) in zip(got, wins):
        nll = -float(np.mean(res.logprob.astype(np.float64)))
        weight = hf_weight if weighting == "hf" else len(cont)
        nll_sum += nll * weight
        n_tokens += weight
    return math.exp(nll_sum / n_tokens) if n_tokens else float("nan")


@metric("perplexity", version="1", params=PerplexityParams, needs=("model", "texts"),
        requests={"model": {"token_stats": ("logprob",)}})
def perplexity(model: Any, texts: list, params: PerplexityParams):
    """Perplexity of the text set under HF's sliding-window recipe (stride, max length)."""
    strings = [t["text"] if isinstance(t, dict) else str(t) for t in texts]
    enc = model.encoder()
    docs = strings if params.per_text else [params.join.join(strings)]
    plans = [windows(encode(enc, d), params.max_length, params.stride) for d in docs]
    got = yield [TokenStats(c, t) for plan in plans for c, t, _ in plan]
    values, at = [], 0
    for plan in plans:
        values.append(_ppl(got[at : at + len(plan)], plan, params.weighting))
        at += len(plan)
    if not any(plan for plan in plans):
        return Result.nan("the texts hold fewer than two tokens: nothing to predict")
    if not params.per_text:
        return Result(agg_value=values[0], extra={"windows": len(plans[0])})
    return Result(agg_value=float(np.nanmean(values)), value_by_index={str(i): v for i, v in enumerate(values)})


class ChangeParams(PerplexityParams):
    pass


def _pair(p: ChangeParams) -> dict:
    settings = PerplexityParams(**p.model_dump()).model_dump()
    return {"edited": perplexity(**settings), "base": perplexity(bind={"model": "base_model"}, **settings)}


@metric("perplexity_change", version="1", params=ChangeParams, parents=_pair)
def perplexity_change(edited: Result, base: Result) -> Result:
    """Perplexity of the edited model minus the original's (and their ratio)."""
    a, b = edited.agg_value, base.agg_value
    return Result(agg_value=a - b, extra={"edited": a, "base": b, "ratio": a / b if b else float("nan")})
