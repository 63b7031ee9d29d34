"""The tokenizer half of a transformers model: text -> request ids, ids -> text.

:class:`HFEncoder` builds ids exactly the way open-unlearning builds its datasets
(``preprocess_chat_instance`` for QA items, ``preprocess_pretraining_instance`` for
completions), quirks included, so every number can be compared with its logs. A
``joint`` mode fixes the prompt/answer boundary bug (open-unlearning #195) for users
who want the corrected score. Only the tokenizer is needed: no weights, no torch.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from .base import Encoded, PromptTemplate


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _backend_body(backend: Any) -> str:
    """The serialized tokenizer without its call-time state.

    ``truncation`` and ``padding`` in the backend JSON are whatever the *last* call
    left there (``tok(x, max_length=8, truncation=True)`` sets them), not properties of
    the tokenizer; hashing them would make the fingerprint depend on call history.
    """
    data = json.loads(backend.to_str())
    data.pop("truncation", None)
    data.pop("padding", None)
    return json.dumps(data, sort_keys=True)


@contextmanager
def _call_state_kept(tokenizer: Any) -> Iterator[None]:
    """Leave the caller's tokenizer as it was: a call with ``truncation=True`` sets truncation in
    the fast tokenizer's backend and leaves it there, so a user who saves that tokenizer afterwards
    (the Trainer callback's own checkpoint, say) would write another ``tokenizer.json``, and the
    folder would no longer match what was evaluated."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        yield
        return
    truncation, padding = backend.truncation, backend.padding
    try:
        yield
    finally:
        if backend.truncation != truncation:
            backend.no_truncation() if truncation is None else backend.enable_truncation(**truncation)
        if backend.padding != padding:
            backend.no_padding() if padding is None else backend.enable_padding(**padding)


class HFEncoder:
    """Text -> request ids, the way open-unlearning builds its datasets (spec section 2)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._fp: str | None = None

    eos_token = property(lambda self: self.tokenizer.eos_token)
    eos_token_id = property(lambda self: self.tokenizer.eos_token_id)
    pad_token_id = property(lambda self: self.tokenizer.pad_token_id)

    def fingerprint(self) -> str:
        """Hash of what tokenization depends on: the serialized tokenizer, specials, template."""
        if self._fp is None:
            tok = self.tokenizer
            backend = getattr(tok, "backend_tokenizer", None)
            body = _backend_body(backend) if backend is not None else json.dumps(sorted(tok.get_vocab().items()))
            self._fp = _digest("hf-tok-1", type(tok).__name__, body,
                               json.dumps(tok.special_tokens_map, sort_keys=True, default=str),
                               str(tok.chat_template), str(getattr(tok, "truncation_side", "")))
        return self._fp

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Text -> ids, as ``tokenizer(text, add_special_tokens=...)["input_ids"]``."""
        return self._ids(text, None, special=add_special_tokens)

    def _ids(self, text: str, max_length: int | None, offsets: bool = False, special: bool = True) -> Any:
        kw: dict[str, Any] = {"add_special_tokens": special}
        if max_length is not None:
            kw.update(max_length=max_length, truncation=True)
        if offsets:
            kw["return_offsets_mapping"] = True
        with _call_state_kept(self.tokenizer):
            enc = self.tokenizer(text, **kw)
        return enc if offsets else list(enc["input_ids"])

    def _chat(self, msgs: list[dict], tokenize: bool, gen_prompt: bool, date_string: str | None) -> Any:
        kw = {"date_string": date_string} if date_string is not None else {}
        if tokenize:
            kw["return_dict"] = False
        out = self.tokenizer.apply_chat_template(msgs, tokenize=tokenize, add_generation_prompt=gen_prompt, **kw)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out) if tokenize else out

    def encode_qa(self, question: str, answer: str, template: PromptTemplate,
                  fewshot: Sequence[tuple[str, str]] = (), joint: bool = False, max_length: int = 512,
                  answer_only: bool = False) -> Encoded:
        """One QA item.

        Default (``joint=False``) reproduces open-unlearning bit for bit: the prompt and
        the prompt+answer are tokenized separately and the first ``len(prompt_ids)`` ids
        of the full sequence are context. When a BPE merge crosses the boundary
        ("Answer: " + "Dara" -> ``ĠDara``) the first answer token lands in the context and
        is never scored. ``joint=True`` tokenizes the full text once and splits at the
        answer's first character, so the boundary token is scored. ``prompt_ids`` (the
        generation input) is the separately tokenized prompt in both modes. The chat path
        is not truncated (open-unlearning does not truncate it either).

        ``answer_only=True`` scores the answer's own tokens, all of them and nothing else: the
        split is the joint one (the boundary token is the answer's), and what the chat template
        writes after the answer (ChatML's ``<|im_end|>`` and newline) and the appended eos are
        left out, so a one-token answer is one scored token, not four. open-unlearning scores
        them all (the default).
        """
        t, cut = template, 0
        joint = joint or answer_only
        if t.apply_chat_template:
            chat = [{"role": "system", "content": t.system_prompt}] if t.system_prompt else []
            for q, a in [*fewshot, (question, answer)]:
                chat += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            prompt_ids = self._chat(chat[:-1], True, True, t.date_string)
            if joint:
                prompt_text = self._chat(chat[:-1], False, True, t.date_string)
                full_text = self._chat(chat, False, False, t.date_string)
                if not full_text.startswith(prompt_text):
                    raise ValueError("encode_qa(joint=True): the chat template does not render the "
                                     "prompt as a prefix of the conversation; cannot split it")
                full, split = self._split(full_text, len(prompt_text), None, special=False)
            else:
                full = self._chat(chat, True, False, t.date_string)
        else:
            wrapped = t.system_prompt_with_special_tokens or ""
            for q, a in fewshot:
                wrapped += t.user_start_tag + q + t.user_end_tag + t.asst_start_tag + a + t.asst_end_tag
            wrapped += t.user_start_tag + question + t.user_end_tag + t.asst_start_tag
            prompt_ids = self._ids(wrapped, max_length)
            if joint:
                full, split = self._split(wrapped + answer, len(wrapped), max_length, special=True)
            else:
                full = self._ids(wrapped + answer, max_length)
            if len(full) >= max_length:  # maybe cut: count what the cut dropped
                cut = len(self._ids(wrapped + answer, None)) - len(full)
        if not joint:
            split = len(prompt_ids)
        if answer_only:
            tail = self._template_tail(chat, t.date_string, answer) if t.apply_chat_template and not cut else 0
            full = full[: max(split + 1, len(full) - tail)]
        elif not full or full[-1] != self.eos_token_id:
            full = full + [self.eos_token_id]  # after truncation, as open-unlearning does (513 ids)
        return Encoded(context_ids=tuple(full[:split]), continuation_ids=tuple(full[split:]),
                       prompt_ids=tuple(prompt_ids), truncated=cut)

    def _template_tail(self, chat: list[dict], date_string: str | None, answer: str) -> int:
        """How many ids the chat template writes after the last answer (ChatML: ``<|im_end|>``
        and a newline): the tokens of the rendered conversation that start after the answer's
        last character (its tokenization is the one ``apply_chat_template`` returns)."""
        text = self._chat(chat, False, False, date_string)
        found = text.rfind(answer) if answer else -1
        if found < 0 and answer.strip():
            found = text.rfind(answer.strip())
            answer = answer.strip()
        if found < 0:
            return 0
        end = found + len(answer)
        if not getattr(self.tokenizer, "is_fast", False):
            return len(self._ids(text[end:], None, special=False)) if text[end:] else 0
        offsets = self._ids(text, None, offsets=True, special=False)["offset_mapping"]
        return sum(1 for s, e in offsets if s >= end and e > s)

    def _split(self, text: str, char: int, max_length: int | None, special: bool) -> tuple[list[int], int]:
        """Tokenize ``text`` once; the split is the first token that ends after ``char``."""
        if not getattr(self.tokenizer, "is_fast", False):
            raise NotImplementedError("joint=True needs a fast tokenizer (offset mappings)")
        enc = self._ids(text, max_length, offsets=True, special=special)
        ids, offs = list(enc["input_ids"]), enc["offset_mapping"]
        split = next((i for i, (s, e) in enumerate(offs) if e > char and e > s), len(ids))
        return ids, split

    def encode_completion(self, prefix: str, text: str, insert_space: bool = False, max_length: int = 2048) -> Encoded:
        """open-unlearning's CompletionDataset item: score ``text`` after ``prefix``.

        No eos is appended; the full sequence is cut to ``len(prefix_ids) + max_length``;
        with an empty prefix (and no bos) only index 0 is context.
        """
        full = self._ids(prefix + (" " if insert_space else "") + text, None)
        prefix_ids = self._ids(prefix, None)
        cut = max(0, len(full) - len(prefix_ids) - max_length)
        full = full[: len(prefix_ids) + max_length]
        n = max(len(prefix_ids), 1)
        return Encoded(context_ids=tuple(full[:n]), continuation_ids=tuple(full[n:]), prompt_ids=tuple(prefix_ids),
                       truncated=cut)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True,
               clean_up_tokenization_spaces: bool = False) -> str:
        """ids -> text.

        open-unlearning asks ``batch_decode`` for ``clean_up_tokenization_spaces=True``;
        transformers 4.x (its logs were made with 4.45) then removes the space before
        punctuation and contractions (" ." -> "."), while transformers >= 5 ignores the
        flag for BPE tokenizers, with a warning. We decode without it and apply 4.x's
        clean-up ourselves, so the ground truths and generations ROUGE sees are the
        reference's whatever transformers is installed.
        """
        text = self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False)
        return clean_up_tokenization(text) if clean_up_tokenization_spaces else text


def clean_up_tokenization(text: str) -> str:
    """transformers 4.x's ``clean_up_tokenization``: drop the space before punctuation/contractions."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                 (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(a, b)
    return text
