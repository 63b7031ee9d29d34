"""The adapter interface: the only place where text becomes ids and ids meet weights.

Two halves, loaded separately so that a warm run pays for neither more than it needs:

* an :class:`Encoder` (the tokenizer side): prompt templates, text -> ids, ids -> text.
  Scorers use it to *build* requests; it never loads weights.
* a :class:`ModelAdapter` (the weights side): runs one batch of same-kind requests. Only
  the executor holds one, and only after the request cache missed.

A :class:`ModelResource` ties both to a fingerprint that can be computed without
loading either. The adapter and resource halves are declared in ``engine/backend.py``
(the backend contract, re-exported here); this module keeps the encoder side.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ..backend import ModelAdapter, ModelResource, OutOfMemory  # noqa: F401 - re-exported


class PromptTemplate(BaseModel):
    """open-unlearning's ``template_args``, field for field.

    ``apply_chat_template=True`` uses the tokenizer's chat template (with
    ``system_prompt`` and ``date_string``); otherwise the tags wrap each turn:
    ``system_prompt_with_special_tokens + [user_start + q + user_end + asst_start + a +
    asst_end]* + user_start + q + user_end + asst_start``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    apply_chat_template: bool = False
    system_prompt: str | None = None
    system_prompt_with_special_tokens: str | None = None
    user_start_tag: str = "Question: "
    user_end_tag: str = "\n"
    asst_start_tag: str = "Answer: "
    asst_end_tag: str = "\n\n"
    date_string: str | None = None

    @classmethod
    def plain(cls) -> "PromptTemplate":
        return cls()

    @classmethod
    def chat(cls, system_prompt: str | None = None, date_string: str | None = None) -> "PromptTemplate":
        return cls(apply_chat_template=True, system_prompt=system_prompt, date_string=date_string)


class Encoded(BaseModel):
    """Ids of one teacher-forced example: score ``continuation`` after ``context``."""

    model_config = ConfigDict(frozen=True)

    context_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]
    prompt_ids: tuple[int, ...]  # what generation starts from
    truncated: int = 0  # tokens cut from the end of the scored sequence by ``max_length``


@runtime_checkable
class Encoder(Protocol):
    """Tokenizer side of a model. Cheap to load; never touches weights.

    ``encode``/``decode`` are the plain text <-> ids pair every encoder implements, with
    the meaning transformers gives them: ``add_special_tokens=True`` adds what the
    tokenizer adds around one text (a bos for Llama-style models), ``False`` gives the
    bare ids of the text (use it for a continuation). ``encode_qa`` and
    ``encode_completion`` build teacher-forced examples the way open-unlearning does.
    """

    eos_token: str | None
    eos_token_id: int | None
    pad_token_id: int | None

    def fingerprint(self) -> str: ...

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def encode_qa(
        self,
        question: str,
        answer: str,
        template: PromptTemplate,
        fewshot: Sequence[tuple[str, str]] = (),
        joint: bool = False,
        max_length: int = 512,
        answer_only: bool = False,
    ) -> Encoded: ...

    def encode_completion(
        self, prefix: str, text: str, insert_space: bool = False, max_length: int = 2048
    ) -> Encoded: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...
