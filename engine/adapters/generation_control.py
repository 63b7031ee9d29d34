"""Per-sequence control of batched generation: stop conditions and seeded sampling.

Kept apart from the adapter so the rules that make batched generation equal to
one-at-a-time generation (each row stops on its own; each row samples from its own
seeded generator) are in one small place. Both generation paths use them: the lean
decode loop (hf_generation.DecodeLoop) per row, and transformers' ``generate`` through
:class:`RowStops` and :class:`SeededSampler`. torch is imported inside the functions.
"""

from __future__ import annotations

from typing import Any

# Heavy imports (torch) happen inside the functions that use them: a warm rerun never pays for them.


def row_done(tokenizer: Any, new: list[int], settings: Any, eos_ids: set) -> bool:
    """Whether a row with new tokens ``new`` (at least one) is finished: its last token is
    an eos, it reached its own max_new_tokens, or its decoded new text (special tokens
    skipped) contains one of its stop strings."""
    if new[-1] in eos_ids or len(new) >= settings.max_new_tokens:
        return True
    if settings.stop_strings:
        text = tokenizer.decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return any(x in text for x in settings.stop_strings)
    return False


def row_generator(settings: Any, device: Any) -> Any:
    """The row's own ``torch.Generator``, seeded with its request's seed (None if greedy)."""
    import torch

    if not settings.do_sample:
        return None
    if settings.temperature <= 0:
        raise ValueError("GenerationSettings: sampling needs temperature > 0")
    return torch.Generator(device=device).manual_seed(int(settings.seed))


def draw(scores: Any, settings: Any, gen: Any) -> Any:
    """One token id (a 1-element tensor) from a row's ``[vocab]`` scores, after temperature,
    top-k and top-p, drawn from the row's own generator."""
    import torch

    probs = torch.softmax(scores.float() / settings.temperature, dim=-1)
    top_k = getattr(settings, "top_k", 0)
    if 0 < top_k < probs.shape[0]:  # the k likeliest tokens, renormalised (ROME's generate_fast)
        kept = torch.zeros_like(probs).scatter(0, probs.topk(top_k).indices, 1.0)
        probs = probs * kept
    if settings.top_p < 1.0:
        sp, order = probs.sort(descending=True)
        sp[(sp.cumsum(0) - sp) >= settings.top_p] = 0  # mass before this token already reaches top_p
        probs = torch.zeros_like(probs).scatter(0, order, sp)
    return torch.multinomial(probs, 1, generator=gen)


class RowStops:
    """Stopping criterion for ``generate``, per sequence (see :func:`row_done`).

    generate() pads a finished sequence while the others go on, and stops the batch when
    all are done. ``keep[i]`` = new tokens to return.
    """

    def __init__(self, tokenizer: Any, prompt_len: int, settings: list, eos_ids: set):
        self.tokenizer, self.prompt_len, self.settings, self.eos_ids = tokenizer, prompt_len, settings, eos_ids
        self.keep: list[int | None] = [None] * len(settings)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        new = input_ids[:, self.prompt_len :].cpu()
        step = new.shape[1]
        for i, s in enumerate(self.settings):
            if self.keep[i] is None and step > 0 and row_done(self.tokenizer, new[i].tolist(), s, self.eos_ids):
                self.keep[i] = step
        return torch.tensor([k is not None for k in self.keep], device=input_ids.device)


class SeededSampler:
    """Sampling as a logits processor for ``generate``, one generator per sequence.

    generate() runs greedily; for each sampling sequence this draws the next token with
    :func:`draw` and leaves only that token finite, so the argmax takes it. Guarantee: a
    sampled result depends only on its own request (prompt and settings), not on its
    batch neighbours or their order, up to float differences between batch shapes. It is
    not the token stream transformers' own ``do_sample=True`` would draw.
    """

    def __init__(self, settings: list, device: Any):
        self.rows = [(i, s, row_generator(s, device)) for i, s in enumerate(settings) if s.do_sample]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for i, s, gen in self.rows:
            tok = draw(scores[i], s, gen)
            row = torch.full_like(scores[i], float("-inf"))
            row[tok] = 0
            scores[i] = row
        return scores
