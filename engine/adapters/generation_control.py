"""Per-sequence control of batched generation: stop conditions and seeded sampling.

Kept apart from the adapter so the rules that make batched generation equal to
one-at-a-time generation (each row stops on its own; each row samples from its own
seeded generator) are in one small place. torch is imported inside the methods.
"""

from __future__ import annotations

from typing import Any


class RowStops:
    """Stopping criterion, per sequence: its own max_new_tokens, an eos, or a stop string.

    A sequence is done the first step its decoded new text (special tokens skipped)
    contains one of its stop strings; generate() then pads it while the others go on,
    and stops the batch when all are done. ``keep[i]`` = new tokens to return.
    """

    def __init__(self, tokenizer: Any, prompt_len: int, settings: list, eos_ids: set):
        self.tokenizer, self.prompt_len, self.settings, self.eos_ids = tokenizer, prompt_len, settings, eos_ids
        self.keep: list[int | None] = [None] * len(settings)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        new = input_ids[:, self.prompt_len :].cpu()
        step = new.shape[1]
        for i, s in enumerate(self.settings):
            if self.keep[i] is not None or step == 0:
                continue
            if int(new[i, -1]) in self.eos_ids or step >= s.max_new_tokens:
                self.keep[i] = step
            elif s.stop_strings:
                text = self.tokenizer.decode(new[i].tolist(), skip_special_tokens=True, clean_up_tokenization_spaces=False)
                if any(x in text for x in s.stop_strings):
                    self.keep[i] = step
        return torch.tensor([k is not None for k in self.keep], device=input_ids.device)


class SeededSampler:
    """Sampling as a logits processor, with one ``torch.Generator`` per sequence.

    generate() runs greedily; for each sampling sequence this draws the next token from
    its own generator (seeded with the request's seed) after temperature and top-p, and
    leaves only that token finite, so the argmax takes it. Guarantee: a sampled result
    depends only on its own request (prompt and settings), not on its batch neighbours
    or their order, up to float differences between batch shapes. It is not the token
    stream transformers' own ``do_sample=True`` would draw.
    """

    def __init__(self, settings: list, device: Any):
        import torch

        self.rows = []
        for i, s in enumerate(settings):
            if s.do_sample:
                if s.temperature <= 0:
                    raise ValueError("GenerationSettings: sampling needs temperature > 0")
                self.rows.append((i, s, torch.Generator(device=device).manual_seed(int(s.seed))))

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for i, s, gen in self.rows:
            probs = torch.softmax(scores[i].float() / s.temperature, dim=-1)
            if s.top_p < 1.0:
                sp, order = probs.sort(descending=True)
                sp[(sp.cumsum(0) - sp) >= s.top_p] = 0  # mass before this token already reaches top_p
                probs = torch.zeros_like(probs).scatter(0, order, sp)
            tok = torch.multinomial(probs, 1, generator=gen)
            row = torch.full_like(scores[i], float("-inf"))
            row[tok] = 0
            scores[i] = row
        return scores
