"""Token statistics with shared contexts: a context's KV computed once for all its continuations.

TOFU scores each question with seven answers (the answer, its paraphrase, five perturbed
ones) and a multiple-choice task each question with its options: the same context ids with
different continuations. Forwarding each pair whole computes the context's keys and values
once per continuation; here the batch's distinct contexts go through the model once
(left padded, into a ``DynamicCache``), the cache rows are repeated for each continuation,
and the continuations go through on top of it (right padded, in groups of similar length:
:func:`answer_groups`) with their position ids continuing their context's. A head every
context starts with (a chat template's system prompt) is forwarded once for the batch
(:func:`shared_head`), which also serves a batch of contexts that all differ (:func:`shares`).
With a real tokenizer's chat template the context is half of a question's tokens or more
(tests/perf/bench_prefix_sharing.py).

Each row sees what the plain path shows it: the same ids, the same attention mask
(padding, and in reference mode every id equal to the pad id, as open-unlearning's collator
masks them) and the same position ids (0, 1, ... from the row's first token, masked tokens
counted, as the model's own ``arange`` counts them in a right-padded batch). Only the float
summation order changes (other matrix shapes), so the log-probs move by float32 rounding:
docs/performance.md states the tolerance and tests/engine/test_prefix_sharing.py holds it.

The statistics come from the hidden states through the head a chunk of rows at a time,
as :meth:`HFAdapter._token_stats` computes them (``_stats_kernel``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ...requests import TokenStats, TokenStatsResult
from .hf_generation import forward_params
from .hf_heads import forward_after_head, head_layout, shared_head

# Heavy imports (torch, transformers) happen inside the functions that use them.


class PrefixSharing:
    """One adapter's setting and account for one kind: whether the executor asked for sharing (and
    the model's cache allows it), and the rows, shared contexts (token statistics) or prompt heads
    (generation) and tokens served that way so far (run.json's ``executor.served``)."""

    def __init__(self, unit: str = "contexts") -> None:
        self.available: bool | None = None  # None until the first group of its kind asks
        self.on = False
        self.unit = unit  # what is shared: token statistics' contexts, generation's prompt heads
        self.counts = {"rows": 0, unit: 0, "tokens_asked": 0, "tokens_forwarded": 0}

    def decide(self, model: Any, wanted: bool) -> bool:
        if self.available is None:
            self.available = cache_fits(model)
        self.on = bool(wanted and self.available)
        return self.on

    def account(self) -> dict | None:
        if self.available is None:
            return None
        if not self.available:
            return {"prefix_sharing": "unavailable: this model's cache is not a plain DynamicCache"}
        return {"prefix_sharing": "on", **self.counts} if self.on else {"prefix_sharing": "off"}

    def add(self, rows: int, shared: int, asked: int, forwarded: int) -> None:
        c = self.counts
        c["rows"], c[self.unit] = c["rows"] + rows, c[self.unit] + shared
        c["tokens_asked"], c["tokens_forwarded"] = c["tokens_asked"] + asked, c["tokens_forwarded"] + forwarded


def cache_fits(model: Any) -> bool:
    """Whether this model's cache is a plain per-layer ``DynamicCache`` whose rows can be repeated."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    if getattr(model.config, "is_encoder_decoder", False):
        return False
    try:
        cache = DynamicCache(config=model.config)
    except Exception:  # noqa: BLE001 - a config DynamicCache cannot read: the plain path serves it
        return False
    return bool(getattr(cache, "layers", None)) and all(type(layer) is DynamicLayer for layer in cache.layers)


def shares(reqs: Sequence[TokenStats]) -> bool:
    """Whether :func:`shared_token_stats` serves the batch: every request scores a token (an empty
    continuation is the plain path's case), and a context repeats or every context starts with a
    shared head (:func:`shared_head`); else there is nothing to compute once."""
    if not all(r.continuation_ids for r in reqs):
        return False
    ctx = list(dict.fromkeys(r.context_ids for r in reqs))
    return len(ctx) < len(reqs) or shared_head(ctx) > 0


def forwarded_tokens(reqs: Sequence[TokenStats]) -> int:
    """The real tokens :func:`shared_token_stats` puts through the model for ``reqs``: each distinct
    context once (the head all of them share once), and each continuation less its last token (it
    predicts nothing scored). The run records this count (run.json's ``tokens_real``);
    ``--plan-only`` counts with it too."""
    ctx = list(dict.fromkeys(r.context_ids for r in reqs))
    return sum(map(len, ctx)) - (len(ctx) - 1) * shared_head(ctx) + sum(len(r.continuation_ids) - 1 for r in reqs)


def shared_token_stats(adapter: Any, reqs: list[TokenStats], kernel: Callable) -> list[TokenStatsResult]:
    """:meth:`HFAdapter._token_stats`'s results for ``reqs``, each distinct context forwarded once.

    ``kernel`` is hf_adapter's ``_stats_kernel``; ``adapter.prefixes`` counts the batch's rows,
    contexts and tokens (run.json's ``executor.served``).
    """
    import torch
    from transformers import DynamicCache

    cache_arg = "cache" if "cache" in forward_params(adapter.model) else "past_key_values"  # renamed in transformers 5.24

    model, pad, masked = adapter.model, adapter.pad_id, adapter.masked_id
    contexts: dict[tuple[int, ...], int] = {}
    for r in reqs:
        contexts.setdefault(r.context_ids, len(contexts))
    ctx = list(contexts)
    owner = [contexts[r.context_ids] for r in reqs]
    dev = model.device
    head = shared_head(ctx)  # e.g. the chat template's system prompt: forwarded once for every context
    ids, real = head_layout(ctx, head, pad)
    wc = ids.shape[1]
    pos = (real.cumsum(-1) - 1).clamp(min=0)  # from each context's first token, as a right-padded row counts
    mask = real * (ids != masked).long() if masked is not None else real
    split = adapter.head_split()
    net = split[0] if split else model
    cache = DynamicCache(config=model.config)
    with adapter.no_grad():
        out = forward_after_head(net, ids.to(dev), mask.to(dev), pos.to(dev), head, cache, cache_arg)
        last = out[0][:, -1] if split else out.logits[:, -1]  # predicts each context's first continuation token
        context_kv = [(layer.keys, layer.values) for layer in cache.layers]
        # every scored position's hidden state: a row's first target is predicted at its context's
        # last position (``last``), the others at its continuation's positions, forwarded on top of
        # its context's cache in groups of similar length (answer_groups)
        flat, at, forwarded = [last], {}, head + len(ctx) * (wc - head)
        for group in answer_groups([len(reqs[i].continuation_ids) - 1 for i in range(len(reqs))]):
            wa = max(len(reqs[i].continuation_ids) for i in group) - 1  # the last token predicts nothing scored
            if wa <= 0:
                at.update({i: [] for i in group})
                continue
            aid = torch.full((len(group), wa), pad, dtype=torch.long)
            areal = torch.zeros((len(group), wa), dtype=torch.long)
            for k, i in enumerate(group):
                n = len(reqs[i].continuation_ids) - 1
                aid[k, :n], areal[k, :n] = torch.tensor(reqs[i].continuation_ids[:-1], dtype=torch.long), 1
            amask = areal * (aid != masked).long() if masked is not None else areal
            rows = torch.tensor([owner[i] for i in group], dtype=torch.long)
            apos = torch.tensor([len(ctx[owner[i]]) for i in group], dtype=torch.long)[:, None] + torch.arange(wa)[None]
            sel = rows.to(dev)
            for layer, (keys, values) in zip(cache.layers, context_kv):
                layer.keys, layer.values = keys.index_select(0, sel), values.index_select(0, sel)
            out = net(input_ids=aid.to(dev), attention_mask=torch.cat([mask.index_select(0, rows), amask], 1).to(dev),
                      position_ids=apos.to(dev), use_cache=True, **{cache_arg: cache})
            body = out[0] if split else out.logits
            base = len(ctx) + sum(x.shape[0] for x in flat[1:])
            flat.append(body.reshape(-1, body.shape[-1]))
            for k, i in enumerate(group):
                at[i] = range(base + k * wa, base + k * wa + len(reqs[i].continuation_ids) - 1)
            forwarded += len(group) * wa
        hidden = torch.cat(flat)
        at_t = torch.tensor([j for i in range(len(reqs)) for j in [owner[i], *at[i]]], dtype=torch.long, device=dev)
        tgt = torch.tensor([t for r in reqs for t in r.continuation_ids], dtype=torch.long, device=dev)
        k = adapter.stats_chunk_rows
        parts = []
        for c in range(0, len(at_t), k):
            h = hidden.index_select(0, at_t[c : c + k])
            parts.append(kernel((split[1](h) if split else h).float(), tgt[c : c + k]))
    lp, am, mu, var = (torch.cat(x).cpu().numpy() for x in zip(*parts))
    adapter.record_tokens(forwarded_tokens(reqs), forwarded)
    adapter.prefixes.add(len(reqs), len(ctx), sum(r.length() for r in reqs), forwarded)
    return per_request(reqs, lp, am, mu, var)


# A further forward pass for the answers of one batch costs about this many tokens' work (the
# call's own overhead and a smaller matrix product), so a group of answers is split off only
# when it saves more padding than that.
ANSWER_GROUP_TOKENS = 32


def answer_groups(lengths: Sequence[int]) -> list[list[int]]:
    """Row indices cut into groups of similar length, the longest first, each group right-padded
    to its longest: the cut that minimises padded tokens plus ANSWER_GROUP_TOKENS per group
    (a dynamic programme over the rows sorted by length; a batch holds a few dozen rows)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the first j rows (longest first)
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # rows i .. j-1 in one group, padded to row i's length
            cost = best[i] + ANSWER_GROUP_TOKENS + (j - i) * lengths[order[i]]
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


def per_request(reqs: Sequence[TokenStats], lp: Any, am: Any, mu: Any, var: Any) -> list[TokenStatsResult]:
    """The batch's concatenated per-token arrays cut back into one result per request, in order
    (each request's continuation length; float32 statistics, int32 argmax)."""
    results, done = [], 0
    for r in reqs:
        s = slice(done, done + len(r.continuation_ids))
        done = s.stop
        results.append(TokenStatsResult(lp[s].astype(np.float32), am[s].astype(np.int32),
                                        mu[s].astype(np.float32), var[s].astype(np.float32)))
    return results

