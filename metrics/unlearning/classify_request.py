"""The ``classify_text`` request kind: a text in, its class probabilities out.

open-unlearning's ``classification_prob`` (``forget_Q_A_gibberish``, MUSE's
``forget_gibberish``) runs a Hugging Face sequence classifier over generations. The
engine knows no such kind: this module registers it on import (the request cache finds
its result type there), and ``classifier_backend.py`` serves it.

The request carries the *text*, not ids: the classifier's own tokenizer cuts it at
``max_length`` in the backend, exactly as open-unlearning's one tokenizer call over the
batch does, so the scorer never needs the classifier's tokenizer (nor transformers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...engine.requests import Request, register_kind


@dataclass(frozen=True)
class ClassifyText(Request):
    """Class probabilities (softmax of the logits) of ``text``, truncated to ``max_length`` tokens."""

    text: str
    max_length: int = 512
    kind: ClassVar[str] = "classify_text"
    words: ClassVar[str] = "text classification (a sequence classifier)"
    padding_side: ClassVar[str] = "right"

    def length(self) -> int:
        # for budgets only: a rough token count (4 bytes a token), never above the cut
        return min(self.max_length, len(self.text.encode("utf-8")) // 4 + 2)


@dataclass
class ClassProbs:
    """``probs[c]``: the softmax probability of class ``c`` (float32, as the classifier computed it)."""

    probs: np.ndarray

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"probs": self.probs}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict) -> "ClassProbs":
        return cls(arrays["probs"])


register_kind(ClassifyText, ClassProbs)
