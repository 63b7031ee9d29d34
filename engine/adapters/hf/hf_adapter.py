"""The weights half of a transformers model: runs one batch of same-kind requests.

* TokenStats: one forward pass; per-token statistics computed a chunk of rows at a time
  from the final hidden states, so a ``[batch, len, vocab]`` float32 tensor never exists.
* Generate: hf_generation's continuous-batching decode loop (or ``generate``);
  per-sequence max_new_tokens, stop strings honoured during generation, and seeded
  sampling that does not depend on batch neighbours.
* HiddenStates: the requested layers of HF's ``output_hidden_states``.

Attention mask (``attention_mask``): ``"reference"`` (the default) is open-unlearning's
``input_ids != pad_token_id``, so with pad == eos every real eos inside a sequence (and the
bos when bos == eos == pad) is hidden from attention, as in its evaluations; ``"padding"``
masks only the padding. See :meth:`HFAdapter.pad`.

Kinds are served by the handlers registered on ``HFAdapter.handlers`` (backend.Handlers):
the four above here, a plugin's own kind where the plugin lives. Helpers use the public
``pad``, ``head_split`` and ``record_tokens``. Out-of-memory errors become
:class:`OutOfMemory` so the executor halves its budget (this adapter keeps no copy).
torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Sequence

import numpy as np

from ...requests import Generate, GenerateResult, HiddenStates, HiddenStatesResult, Request, TokenStats, TokenStatsResult
from ...malloc import keep_freed_memory
from ...backend import TOKEN_FIELDS, Capabilities, Handlers, ModelAdapter, OutOfMemory
from .hf_generation import DecodeLoop, hf_generate, lean_loop_fits
from . import hf_prefix

# Heavy imports (torch) happen inside the functions that use them: a warm rerun never pays for them.
# Rows of [rows, vocab] float32 per step of the statistics kernel (256 x 128k vocab = 128 MB).
STATS_CHUNK_ROWS = 256
# "reference": open-unlearning's ``mask = input_ids != pad_token_id``; "padding": padding only.
ATTENTION_MASKS = ("reference", "padding")
# Executor batches of Generate requests handed to the decode loop at once (see group_budget).
GENERATE_GROUP = 8
# CPU decode rows at once: a decode step is one token per row, so the scoring budget
# (4,096 tokens, ~16 prompts of 250) says nothing about it; on the 4 x 256 Llama 64
# rows decoded ~1.8x faster per token than 16, and the KV cache stays small.
CPU_DECODE_ROWS = 64


class HFAdapter(ModelAdapter):
    """Runs one batch of same-kind requests on a loaded transformers causal LM.

    ``padding_side`` overrides the teacher-forced kinds' own side (tests use it to check
    that left and right padding agree); generation always pads on the left. After each
    batch ``tokens_used()`` is (real, padded) tokens, for the executor's statistics.

    ``attention_mask="reference"`` (default) masks every token equal to the tokenizer's
    pad id, as open-unlearning's collator does, in TokenStats, Generate and GradNorm;
    ``"padding"`` masks only padding. HiddenStates always masks only padding.
    """

    handlers: ClassVar[Handlers] = Handlers()

    def __init__(self, model: Any, tokenizer: Any, padding_side: str | None = None,
                 stats_chunk_rows: int = STATS_CHUNK_ROWS, attention_mask: str = "reference"):
        if padding_side not in (None, "left", "right"):
            raise ValueError(f"padding_side must be None, 'left' or 'right', not {padding_side!r}")
        if attention_mask not in ATTENTION_MASKS:
            raise ValueError(f"attention_mask must be one of {ATTENTION_MASKS}, not {attention_mask!r}")
        self.model, self.tokenizer = model, tokenizer
        self.device = str(model.device.type)
        self.dtype = str(model.dtype).replace("torch.", "")
        if self.device == "cpu":
            keep_freed_memory()  # CPU tensors of tens of MB, freed and made again each batch (malloc.py)
        self.padding_side, self.stats_chunk_rows = padding_side, stats_chunk_rows
        self.attention_mask = attention_mask
        self.last_batch_tokens = (0, 0)
        self._head: Any = None
        self._lean: bool | None = None  # whether the lean decode loop serves this model
        self._root_only = False  # weights split over ranks: see root_forward_only
        self._generate_budget: Any = None  # the executor's current budget, for the loop's rows
        self.prefixes = hf_prefix.PrefixSharing()  # token statistics' shared contexts: on or off, and the account
        self.prompt_heads = hf_prefix.PrefixSharing("heads")  # generation's prompts: their shared head forwarded once
        # Rows decoding at once; None: from the executor's budget (see _slots).
        self.generate_slots: int | None = None
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)
        # The id open-unlearning's collator masks wherever it occurs. Without a pad token
        # (HFModel always sets one) there is no reference rule: only padding is masked.
        self.masked_id = pad if attention_mask == "reference" else None

    def run_batch(self, requests: Sequence[Request]) -> list[Any]:
        if not requests:
            return []
        kinds = {r.kind for r in requests}
        if len(kinds) != 1:
            raise ValueError(f"run_batch serves one request kind at a time, got {sorted(kinds)}")
        kind = kinds.pop()
        run = self.handlers.get(kind)
        if run is None:
            raise NotImplementedError(f"HFAdapter cannot serve {kind!r} requests")
        try:
            return run(self, list(requests))
        except Exception as e:  # noqa: BLE001 - re-raised unless it is an out-of-memory error
            if not _is_oom(e):
                raise
            message = f"{type(e).__name__}: {str(e)[:200]}"
        # Outside the except block the failed batch's frames (and tensors) are released.
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise OutOfMemory(f"{len(requests)} {kind} request(s) did not fit on {self.device}: {message}")

    @classmethod
    def static_capabilities(cls) -> Capabilities:
        """Every registered kind, every token-statistic field: known before any weights load."""
        return Capabilities(cls.handlers.kinds(), frozenset(TOKEN_FIELDS))

    def capabilities(self) -> Capabilities:
        return self.static_capabilities()

    def lockstep(self) -> tuple[Any, int]:
        """The module every rank's forward passes go through together, and the pad id a rank
        without rows of its own feeds it (asked only when the resource is ``sharded``)."""
        return self.model, self.pad_id

    def tokens_used(self) -> tuple[int, int]:
        return self.last_batch_tokens

    def record_tokens(self, real: int, padded: int) -> None:
        """What a handler's batch put through the model (for the executor's statistics)."""
        self.last_batch_tokens = (int(real), int(padded))

    def budget_hint(self) -> dict | None:
        """Free device memory and a rough per-token cost, for batching.default_budget (cuda only).

        Per token: K and V for every layer (generation's cache), the MLP's intermediate
        activations, a few hidden-size buffers and one row of logits, in the model dtype.
        """
        if self.device != "cuda":
            return None
        import torch

        free, _ = torch.cuda.mem_get_info(self.model.device)
        cfg = self.model.config

        def get(*names: str) -> int:
            return int(next((getattr(cfg, n) for n in names if getattr(cfg, n, None)), 0))

        hidden, layers = get("hidden_size", "n_embd"), get("num_hidden_layers", "n_layer")
        inter = get("intermediate_size", "n_inner") or 4 * hidden
        per_token = self.model.dtype.itemsize * (2 * layers * hidden + 2 * inter + 6 * hidden + get("vocab_size"))
        return {"free_bytes": int(free), "bytes_per_token": int(per_token)}

    def served(self, kind: str) -> dict | None:
        """A plugin kind's account of how it served its rows (``Handlers.add(..., served=)``); for
        token statistics, whether contexts were shared (hf_prefix) and how much that saved."""
        fn = self.handlers.served(kind)
        if fn is not None:
            return fn(self)
        sharing = {"token_stats": self.prefixes, "generate": self.prompt_heads}.get(kind)
        return sharing.account() if sharing is not None else None

    def share_prefixes(self, kind: str, wanted: bool) -> bool:
        """Token statistics share a batch's repeated contexts (hf_prefix; packed together by the executor),
        generation its prompts' shared head (a system prompt), when ``wanted`` and the cache allows."""
        sharing = {"token_stats": self.prefixes, "generate": self.prompt_heads}.get(kind)
        return sharing is not None and not self._root_only and sharing.decide(self.model, wanted)

    def group_budget(self, kind: str, budget: Any) -> Any:
        """The executor's batch budget for ``kind``. Generation by the decode loop takes
        GENERATE_GROUP batches at once and keeps its active rows under ``budget``
        itself, so a freed slot has a waiting prompt to take. A plugin kind's handler may
        bring its own (``Handlers.add(..., group_budget=)``)."""
        extra = self.handlers.group_budget(kind)
        if extra is not None:
            return extra(self, budget)
        if kind != "generate" or not self._lean_loop():
            return budget
        self._generate_budget = budget
        return dataclasses.replace(budget, tokens=budget.tokens * GENERATE_GROUP,
                                   max_batch=budget.max_batch * GENERATE_GROUP)

    def no_grad(self) -> Any:
        """``torch.inference_mode()``, or ``torch.no_grad()`` for weights split over ranks: FSDP
        keeps tensors made under inference mode, and the next training step then fails."""
        import torch

        return torch.no_grad() if self._root_only else torch.inference_mode()

    def root_forward_only(self) -> None:
        """Weights split over ranks: every forward pass through the root module (the one that
        gathers them and where the ranks are paired), so no head split and no ``generate()``."""
        self._head = False
        self._lean = lean_loop_fits(self.model)
        self._root_only = True

    def _lean_loop(self) -> bool:
        if self._lean is None:
            self._lean = lean_loop_fits(self.model)
        return self._lean

    def _slots(self, reqs: list[Generate]) -> int:
        """Rows decoding at once: ``generate_slots`` if set; on CPU CPU_DECODE_ROWS;
        else as many of the longest request as the executor's budget holds (its KV
        cache and activations), else the whole batch."""
        if self.generate_slots:
            return self.generate_slots
        b = self._generate_budget
        if b is None:
            return len(reqs)
        if self.device == "cpu":
            return CPU_DECODE_ROWS
        return max(1, min(b.max_batch, b.tokens // max(r.length() for r in reqs)))

    # -- batching helpers
    def pad(self, seqs: list[tuple[int, ...]], side: str, reference: bool = True) -> tuple[Any, Any, Any, list[int]]:
        """Pad ids with the pad id; return ids, attention mask, position ids, starts.

        Padding is always masked. With ``attention_mask="reference"`` (and ``reference``)
        every real token equal to the pad id is masked too: open-unlearning's collator
        sets ``mask = ids != pad_token_id``, so with pad == eos every eos inside a
        sequence (Llama-3 chat turns end in the eos ``<|eot_id|>``), and the bos when bos
        == eos == pad (GPT-2 style), is hidden from attention. A single unpadded sequence
        gets the same mask, as open-unlearning's batches of one do.

        Position ids follow the padding only. Right padding passes none (the model's own
        ``arange``, as open-unlearning's ``model(input_ids, attention_mask, labels)``
        does, masked tokens included). Left padding passes ``cumsum(padding) - 1``, the
        same positions shifted past the pads: without them GPT-2's log-probs are badly
        wrong and Llama's drift. Generation passes no position ids; ``generate`` derives
        them from the mask, exactly as in open-unlearning.
        """
        import torch

        if any(len(s) == 0 for s in seqs):
            raise ValueError("cannot run an empty sequence")
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        starts = []
        for i, s in enumerate(seqs):
            a = width - len(s) if side == "left" else 0
            ids[i, a : a + len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, a : a + len(s)] = 1
            starts.append(a)
        pos = (mask.cumsum(-1) - 1).clamp(min=0) if side == "left" else None
        if reference and self.masked_id is not None:
            mask = mask * (ids != self.masked_id).long()
        self.record_tokens(sum(map(len, seqs)), len(seqs) * width)
        dev = self.model.device
        return ids.to(dev), mask.to(dev), None if pos is None else pos.to(dev), starts

    @staticmethod
    def _inputs(ids: Any, mask: Any, pos: Any) -> dict:
        kw = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
        if pos is not None:
            kw["position_ids"] = pos
        return kw

    def head_split(self) -> tuple[Any, Any] | None:
        """(base model, output head) when ``logits == head(base(x))`` for this model.

        Then per-token statistics project only the scored rows, a chunk at a time, and
        the ``[batch, len, vocab]`` logits never exist. Models that post-process logits
        (soft-capping, logit scales) fail this one-off probe and use the full logits.
        """
        if self._head is None:
            import torch

            base, head = getattr(self.model, "base_model", None), self.model.get_output_embeddings()
            ok = False
            if base is not None and base is not self.model and head is not None:
                probe = (torch.arange(8, device=self.model.device) % int(self.model.config.vocab_size))[None]
                with torch.inference_mode():
                    full = self.model(input_ids=probe, use_cache=False).logits.float()
                    part = head(base(input_ids=probe, use_cache=False)[0]).float()
                ok = full.shape == part.shape and bool(torch.allclose(full, part, rtol=1e-3, atol=1e-3))
            self._head = (base, head) if ok else False
        return self._head or None

    # -- kinds
    def _token_stats(self, reqs: list[TokenStats]) -> list[TokenStatsResult]:
        """Per continuation token: target log-prob, argmax, mu and var of log p (float32).

        log_softmax runs in float32 on each chunk of rows (open-unlearning runs it in the
        model dtype; identical for fp32 models, slightly more exact for bf16/fp16).
        """
        import torch

        if any(not r.context_ids for r in reqs):
            raise ValueError("TokenStats needs at least one context token: the first token of a sequence has no prediction")
        if self.prefixes.on and self.padding_side is None and hf_prefix.shares(reqs):
            return hf_prefix.shared_token_stats(self, reqs, _stats_kernel)
        side = self.padding_side or TokenStats.padding_side
        ids, mask, pos, starts = self.pad([r.context_ids + r.continuation_ids for r in reqs], side)
        b_idx, t_idx, tgt = [], [], []
        for i, r in enumerate(reqs):
            first, n = starts[i] + len(r.context_ids) - 1, len(r.continuation_ids)  # logits at t predict t+1
            b_idx += [i] * n
            t_idx += range(first, first + n)
            tgt += r.continuation_ids
        dev = ids.device
        b_idx, t_idx, tgt = (torch.tensor(x, dtype=torch.long, device=dev) for x in (b_idx, t_idx, tgt))
        with self.no_grad():
            split = self.head_split()
            if split:
                hidden = split[0](**self._inputs(ids, mask, pos))[0]
                rows = lambda b, t: split[1](hidden[b, t]).float()  # noqa: E731
            else:
                logits = self.model(**self._inputs(ids, mask, pos)).logits
                rows = lambda b, t: logits[b, t].float()  # noqa: E731
            k = self.stats_chunk_rows
            parts = [_stats_kernel(rows(b_idx[c : c + k], t_idx[c : c + k]), tgt[c : c + k])
                     for c in range(0, len(tgt), k)]
        if parts:
            lp, am, mu, var = (torch.cat(x).cpu().numpy() for x in zip(*parts))
        else:
            lp = am = mu = var = np.zeros(0, dtype=np.float32)
        return hf_prefix.per_request(reqs, lp, am, mu, var)

    def _generate(self, reqs: list[Generate]) -> list[GenerateResult]:
        """Generation with settings per sequence; see hf_generation for the two paths.

        Greedy is what ``generate(ids, attention_mask=mask, do_sample=False,
        pad_token_id=eos)`` gives, as open-unlearning calls it (in reference mode
        ``mask = ids != pad``; position ids follow the mask), one row at a time or
        batched. Each result holds the new ids up to and including the eos or the token
        that completed a stop string, and their text; the text is not cut at the stop string.
        """
        if any(not r.prompt_ids for r in reqs):
            raise ValueError("Generate needs at least one prompt token")
        if self._lean_loop():
            loop = DecodeLoop(self.model, self.tokenizer, self.pad_id, self.masked_id, self._slots(reqs), self.no_grad,
                              heads=self.prompt_heads if self.prompt_heads.on else None)
            results = loop.run(reqs)
            self.record_tokens(*loop.tokens)
            return results
        if self._root_only:
            raise ValueError("generation from weights split over ranks (FSDP, ZeRO-3) runs evaldag's own decode "
                             "loop, and this model's generation config or cache type does not fit it; evaluate "
                             "the saved checkpoint instead")
        ids, mask, _, _ = self.pad([r.prompt_ids for r in reqs], "left")
        results, padded = hf_generate(self, reqs, ids, mask)
        self.record_tokens(sum(len(r.prompt_ids) + len(x.token_ids) for r, x in zip(reqs, results)), padded)
        return results

    def _hidden_states(self, reqs: list[HiddenStates]) -> list[HiddenStatesResult]:
        """``[len(layers), len(ids), hidden]`` float32; layer indices follow HF's
        ``output_hidden_states`` tuple (0 = embeddings, -1 = last, after the final norm).

        Only padding is masked, whatever ``attention_mask`` says: open-unlearning has no
        hidden-state evaluation, so there is no reference behaviour to reproduce, and
        masking ids == pad would leave a sequence made of the pad token (the embedding
        of the eos) with nothing to attend to."""
        import torch

        side = self.padding_side or HiddenStates.padding_side
        ids, mask, pos, starts = self.pad([r.ids for r in reqs], side, reference=False)
        with self.no_grad():
            split = self.head_split()
            net = split[0] if split else self.model
            hs = net(**self._inputs(ids, mask, pos), output_hidden_states=True).hidden_states
            out = []
            for i, r in enumerate(reqs):
                bad = [l for l in r.layers if not -len(hs) <= l < len(hs)]
                if bad:
                    raise ValueError(f"HiddenStates: layers {bad} out of range for {len(hs)} hidden-state outputs")
                a, n = starts[i], len(r.ids)
                states = torch.stack([hs[l][i, a : a + n] for l in r.layers]).float().cpu().numpy()
                out.append(HiddenStatesResult(states))
        return out

# The built-in kinds (through the instance, so a test may replace one method); a plugin's kind is added where it lives.
HFAdapter.handlers.add("token_stats", lambda a, reqs: a._token_stats(reqs))
HFAdapter.handlers.add("generate", lambda a, reqs: a._generate(reqs))
HFAdapter.handlers.add("hidden_states", lambda a, reqs: a._hidden_states(reqs))


def _stats_kernel(logits: Any, target: Any) -> tuple[Any, Any, Any, Any]:
    """For float32 ``[rows, vocab]`` logits: log p(target), argmax, mu = sum p log p and
    var = sum p (log p)^2 - mu^2 (the Min-K%++ moments).

    var is computed in its centred form, sum p (log p - mu)^2: the same number without
    the cancellation of two large terms, which in float32 made it depend on the batch
    shape by ~1e-5.
    """
    import torch

    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    var = (p * (logp - mu[:, None]).square()).sum(-1)
    return logp.gather(1, target[:, None])[:, 0], logits.argmax(-1), mu, var


def _is_oom(e: BaseException) -> bool:
    import torch

    types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t)
    return isinstance(e, types) or (isinstance(e, RuntimeError) and "out of memory" in str(e).lower())
