"""Generation for :class:`~evaldag.engine.adapters.hf.hf_adapter.HFAdapter`.

Two paths, the same tokens:

* :class:`DecodeLoop` (the default): a lean greedy/seeded decode loop with continuous
  batching. A row leaves the batch the step it finishes (its KV-cache row is dropped)
  and a waiting prompt is prefilled and takes its place, so compute follows the real
  tokens instead of the longest row of a batch. Each row is computed exactly as
  ``generate`` computes it: the same attention mask (open-unlearning's ``ids != pad`` in
  reference mode, then ones for every new token), position ids ``cumsum(mask) - 1``
  (0 where masked) then ``+1`` per step, the last position's logits, argmax.
  Cache columns that are padding for a row are masked out for it, so they change
  nothing but the float summation order.
* :func:`hf_generate`: transformers' ``generate`` on the whole batch, for models whose
  generation_config adds logits processors (repetition penalty, bad words, forced
  tokens, ...) or whose cache is not a plain per-layer ``DynamicCache``.

Both stop each row on its own (eos, its max_new_tokens, a stop string) and sample from
each row's own seeded generator (generation_control). torch is imported inside.
"""

from __future__ import annotations

import inspect
from collections import deque
from typing import Any, Sequence

import numpy as np

from ...requests import Generate, GenerateResult
from ...streaming import finished
from .hf_heads import forward_after_head, head_layout, shared_head
from ..generation_control import RowStops, SeededSampler, draw, row_done, row_generator

# Heavy imports (torch and transformers) happen inside the functions that use them: a warm rerun never pays for them.

# Generation-config fields that make ``generate`` add a logits processor when greedy,
# with the value that adds none. A model with any other value takes hf_generate.
_NEUTRAL = {
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0), "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,), "min_length": (None, 0), "min_new_tokens": (None, 0),
    "forced_bos_token_id": (None,), "forced_eos_token_id": (None,), "sequence_bias": (None,),
    "suppress_tokens": (None,), "begin_suppress_tokens": (None,), "guidance_scale": (None, 1.0),
    "exponential_decay_length_penalty": (None,), "remove_invalid_values": (None, False),
    "watermarking_config": (None,),
}
# A waiting prompt is prefilled once this share of the slots is free (or none is busy):
# one prefill per freed row would pay a forward pass's overhead per prompt.
REFILL_SHARE = 0.25
# A prefill group is split where padding its prompts to the longest would waste more.
PREFILL_PADDING = 0.03
# Free cache columns a layer's buffer gets when it is (re)allocated.
GROW_TOKENS = 64


def eos_ids(model: Any) -> set:
    eos = getattr(model.generation_config, "eos_token_id", None)
    return set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])


def lean_loop_fits(model: Any) -> bool:
    """Whether :class:`DecodeLoop` computes what ``generate`` would for this model."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    gc = model.generation_config
    if any(getattr(gc, k, None) not in ok for k, ok in _NEUTRAL.items()):
        return False
    if getattr(model.config, "is_encoder_decoder", False):
        return False
    try:
        cache = DynamicCache(config=model.config)
    except Exception:  # noqa: BLE001 - a config DynamicCache cannot read: leave it to generate()
        return False
    return all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))


def forward_params(model: Any) -> set:
    """The parameter names of the transformers model's own ``forward``: the first
    PreTrainedModel inside ``model``, as wrappers (a PEFT model, FSDP) take ``**kwargs``."""
    from transformers import PreTrainedModel

    inner = next((m for m in model.modules() if isinstance(m, PreTrainedModel)), model)
    return set(inspect.signature(inner.forward).parameters)


def decode(tokenizer: Any, toks: Any) -> str:
    return tokenizer.decode(list(toks), skip_special_tokens=True, clean_up_tokenization_spaces=False)


class DecodeLoop:
    """Continuous-batching decode for one list of Generate requests (see module doc).

    ``slots`` rows decode together at most; the rest wait and are prefilled, in the
    order given, as rows finish. ``tokens`` is (real, computed) after :meth:`run`:
    real = prompt + new tokens, computed = the prefill's padded rectangle(s) + one
    token per active row per step, so the padding left is the prefill's left padding.
    """

    def __init__(self, model: Any, tokenizer: Any, pad_id: int, masked_id: int | None, slots: int,
                 no_grad: Any = None, heads: Any = None):

        self.model, self.tokenizer, self.pad_id, self.masked_id = model, tokenizer, pad_id, masked_id
        self.slots, self.eos = max(1, slots), eos_ids(model)
        params = forward_params(model)
        self.keep_arg = "logits_to_keep" in params
        # transformers 5.24 renamed the forward's ``past_key_values`` to ``cache`` (the old
        # name warns on every call, then goes in 5.40); pass the name this version reads.
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.tokens = (0, 0)
        self.no_grad = no_grad  # a context factory (HFAdapter.no_grad); None: torch.inference_mode
        # hf_prefix.PrefixSharing when a prefill group's shared head (a chat template's system
        # prompt) is forwarded once; each prefill adds its rows, whether it shared one, its tokens
        self.share_heads = heads
        self.head_copies = 0  # prompt tokens not forwarded: a shared head's copies beyond its first

    def run(self, reqs: Sequence[Generate]) -> list[GenerateResult]:
        import torch

        dev = self.model.device
        waiting = deque(range(len(reqs)))
        new: list[list[int]] = [[] for _ in reqs]
        gens = [row_generator(r.settings, dev) for r in reqs]
        rows: list[int] = []  # request index of each active batch row
        cache = mask = pos = None
        computed = 0
        broken: set[int] = set()  # requests that met non-finite logits
        refill_at = max(1, int(self.slots * REFILL_SHARE))
        with (self.no_grad or torch.inference_mode)():
            while rows or waiting:
                free = self.slots - len(rows)
                if waiting and (free >= refill_at or not rows):
                    take = []
                    for part in _similar_lengths([waiting.popleft() for _ in range(min(free, len(waiting)))], reqs):
                        out, c2, m2, p2, cost = self._prefill([reqs[i].prompt_ids for i in part])
                        computed += cost
                        cache, mask, pos = _merge(cache, mask, pos, c2, m2, p2)
                        rows, take = rows + part, take + part
                        logits = out if len(take) == len(part) else torch.cat([logits, out])
                else:
                    step = torch.tensor([[new[i][-1]] for i in rows], device=dev)
                    mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
                    pos = pos + 1
                    logits = self._forward(step, mask, pos[:, None], cache)
                    computed += len(rows)
                    take = None
                # logits: [len(rows), vocab] for the rows that just ran: all of them after a
                # decode step, the newcomers (the tail of ``rows``) after a prefill
                ran = rows if take is None else take
                picks = logits.argmax(-1).tolist()
                for j in torch.nonzero(~torch.isfinite(logits).all(-1)).flatten().tolist():
                    broken.add(ran[j])  # an argmax over NaN/inf logits: flagged (requests.nonfinite_output)
                for j, i in enumerate(ran):
                    s = reqs[i].settings
                    new[i].append(int(draw(logits[j], s, gens[i])) if s.do_sample else picks[j])
                done = [k for k, i in enumerate(rows) if row_done(self.tokenizer, new[i], reqs[i].settings, self.eos)]
                for k in done:  # stored at once by the executor: a stop loses only the rows in flight
                    finished(rows[k], self._result(rows[k], new, broken))
                if done:
                    keep = [k for k in range(len(rows)) if k not in set(done)]
                    rows = [rows[k] for k in keep]
                    cache, mask, pos = _select(cache, mask, pos, keep)
        real = sum(len(r.prompt_ids) + len(t) for r, t in zip(reqs, new)) - self.head_copies
        # + one per row: its last new token, which no forward pass reads (counted as generate() counts it)
        self.tokens = (real, computed + len(reqs))
        return [self._result(i, new, broken) for i in range(len(new))]

    def _result(self, i: int, new: list[list[int]], broken: set[int]) -> GenerateResult:
        return GenerateResult(_int32(new[i]), decode(self.tokenizer, new[i]), i in broken)

    def _prefill(self, prompts: list[tuple[int, ...]]) -> tuple[Any, Any, Any, Any, int]:
        """Left-padded prefill of new rows in a fresh cache: (last logits, cache, mask,
        last position, padded tokens). With ``share_heads``, the ids every prompt of the group
        starts with are forwarded once and the rest of each prompt, left-padded, after them
        (hf_heads.head_layout): the same mask and positions, so the same tokens."""
        from transformers import DynamicCache

        head = shared_head(prompts) if self.share_heads is not None else 0
        ids, mask = head_layout(prompts, head, self.pad_id)
        if self.masked_id is not None:
            mask = mask * (ids != self.masked_id).long()
        pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        dev = self.model.device
        ids, mask, pos = ids.to(dev), mask.to(dev), pos.to(dev)
        cache = DynamicCache(config=self.model.config)
        cache.layers = [_GrowingLayer() for _ in cache.layers]
        logits = self._forward(ids, mask, pos, cache, head)
        cost = head + len(prompts) * (ids.shape[1] - head)
        self.head_copies += (len(prompts) - 1) * head
        if self.share_heads is not None:
            self.share_heads.add(len(prompts), head > 0, sum(map(len, prompts)), cost)
        return logits, cache, mask, pos[:, -1], cost

    def _forward(self, ids: Any, mask: Any, pos: Any, cache: Any, head: int = 0) -> Any:
        kw = {"logits_to_keep": 1} if self.keep_arg else {}
        out = forward_after_head(self.model, ids, mask, pos, head, cache, self.cache_arg, **kw)
        return out.logits[:, -1, :].float()


def _growing_layer_class() -> type:
    """A DynamicLayer that appends into a preallocated buffer: ``generate``'s layer
    concatenates the whole cache every step, which cost ~20 % of a CPU decode step.
    ``keys``/``values`` are views of the buffer's filled part: the same values."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.hold(key_states, value_states)
                return self.keys, self.values
            n, t = key_states.shape[-2], self.keys.shape[-2]
            if t + n > self._k.shape[-2]:
                self.hold(self.keys, self.values, room=max(n, GROW_TOKENS))
            self._k[:, :, t : t + n] = key_states
            self._v[:, :, t : t + n] = value_states
            self.keys, self.values = self._k[:, :, : t + n], self._v[:, :, : t + n]
            return self.keys, self.values

        def hold(self, keys: Any, values: Any, room: int = GROW_TOKENS) -> None:
            """Make ``keys``/``values`` the layer's content, with ``room`` free columns."""
            import torch

            b, h, t, d = keys.shape
            self._k = torch.empty((b, h, t + room, d), dtype=keys.dtype, device=keys.device)
            self._v = torch.empty((b, h, t + room, values.shape[-1]), dtype=values.dtype, device=values.device)
            self._k[:, :, :t], self._v[:, :, :t] = keys, values
            self.keys, self.values = self._k[:, :, :t], self._v[:, :, :t]

    return GrowingLayer


def _GrowingLayer() -> Any:  # noqa: N802 - builds a layer; the class needs transformers, imported lazily
    global _GROWING
    if _GROWING is None:
        _GROWING = _growing_layer_class()
    return _GROWING()


_GROWING: Any = None


def _similar_lengths(idx: list[int], reqs: Sequence[Generate]) -> list[list[int]]:
    """Split prompts into prefill groups, longest first, each padded by at most
    PREFILL_PADDING of its rectangle (one group when that holds for all)."""
    idx = sorted(idx, key=lambda i: -len(reqs[i].prompt_ids))
    groups: list[list[int]] = []
    for i in idx:
        n = len(reqs[i].prompt_ids)
        g = groups[-1] if groups else None
        if g is not None:
            width = len(reqs[g[0]].prompt_ids)
            real = sum(len(reqs[j].prompt_ids) for j in g) + n
            if 1 - real / (width * (len(g) + 1)) <= PREFILL_PADDING:
                g.append(i)
                continue
        groups.append([i])
    return groups


def _int32(toks: list[int]) -> Any:

    return np.asarray(toks, dtype=np.int32)


def _merge(cache: Any, mask: Any, pos: Any, c2: Any, m2: Any, p2: Any) -> tuple[Any, Any, Any]:
    """Append the rows of a fresh prefill to the active batch, left-padding the shorter
    of the two caches with masked zero columns."""
    import torch

    if cache is None:
        return c2, m2, p2
    a, b = mask.shape[1], m2.shape[1]
    width = max(a, b)
    for old, add in zip(cache.layers, c2.layers):
        old.hold(torch.cat([_lpad(old.keys, width), _lpad(add.keys, width)], dim=0),
                 torch.cat([_lpad(old.values, width), _lpad(add.values, width)], dim=0))
    mask = torch.cat([_lpad(mask, width), _lpad(m2, width)], dim=0)
    return cache, mask, torch.cat([pos, p2])


def _lpad(x: Any, width: int) -> Any:
    """Zeros on the left of the sequence axis (-2 for a [b, h, t, d] cache, -1 for a mask)."""
    import torch

    axis = -1 if x.dim() == 2 else -2
    short = width - x.shape[axis]
    if short == 0:
        return x
    shape = list(x.shape)
    shape[axis] = short
    return torch.cat([x.new_zeros(shape), x], dim=axis)


def _select(cache: Any, mask: Any, pos: Any, keep: list[int]) -> tuple[Any, Any, Any]:
    """Keep only rows ``keep`` and drop the leading cache columns no kept row attends to."""
    if not keep:
        return None, None, None
    import torch

    idx = torch.tensor(keep, device=mask.device)
    mask = mask.index_select(0, idx)
    cut = int((mask.sum(0) > 0).long().argmax())
    mask = mask[:, cut:]
    for layer in cache.layers:
        layer.hold(layer.keys.index_select(0, idx)[:, :, cut:], layer.values.index_select(0, idx)[:, :, cut:])
    return cache, mask, pos.index_select(0, idx)


def hf_generate(adapter: Any, reqs: list[Generate], ids: Any, mask: Any) -> tuple[list[GenerateResult], int]:
    """transformers' ``generate`` on the whole (left-padded) batch: (results, padded
    tokens = rows x (prompt width + steps run)).

    Greedy is ``generate(ids, attention_mask=mask, do_sample=False, pad_token_id=eos)``
    as open-unlearning calls it, so the model's generation_config (eos ids, repetition
    penalty) still applies; sampling rows draw through SeededSampler.
    """
    import torch
    import transformers

    settings = [r.settings for r in reqs]
    stops = RowStops(adapter.tokenizer, ids.shape[1], settings, eos_ids(adapter.model))
    watch = _FiniteWatch()
    procs = [watch, *([SeededSampler(settings, ids.device)] if any(s.do_sample for s in settings) else [])]
    with torch.inference_mode():
        out = adapter.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max(s.max_new_tokens for s in settings),
            do_sample=False, use_cache=True, pad_token_id=adapter.tokenizer.eos_token_id,
            stopping_criteria=transformers.StoppingCriteriaList([stops]),
            logits_processor=transformers.LogitsProcessorList(procs),
        )
    new = out[:, ids.shape[1] :].cpu().numpy()
    results = []
    for i in range(len(reqs)):
        keep = stops.keep[i] if stops.keep[i] is not None else new.shape[1]
        toks = new[i, :keep].astype(np.int32)
        results.append(GenerateResult(toks, decode(adapter.tokenizer, toks.tolist()), i in watch.rows))
    return results, len(reqs) * out.shape[1]


class _FiniteWatch:
    """A logits processor that changes nothing and notes the rows whose logits are not finite."""

    def __init__(self) -> None:
        self.rows: set[int] = set()

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        self.rows.update(torch.nonzero(~torch.isfinite(scores).all(-1)).flatten().tolist())
        return scores
