"""The ``token_logits`` request kind: a prompt's full-vocabulary logits, as a value.

lm-debugger hands every metric ``token_logits``, the edited model's ``seq_len x vocab``
output on the prompt. No built-in kind carries that (token statistics keep a few numbers
per token on purpose), so the kind is declared here, registered with the engine's kind
registry on import, and served by ``logits_backend.py`` on the backends that can give it
(HF: one forward pass per batch; a server returns top-k log-probs at most, so it cannot,
and the planner refuses such a route before anything runs).

Why a size cap: with a 128k vocabulary one prompt of 40 tokens is 20 MB of float32.
Results over ``max_stored_bytes`` are handed to the scorers that asked and dropped; the
request store keeps only the small ones (short prompts, small vocabularies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...engine.requests import ArrayResult, Request, register_kind

STORED_BYTES = 1 << 20  # 1 MiB: a 30-token prompt of a 8k vocabulary is stored, a 128k one is not


@dataclass(frozen=True)
class TokenLogits(Request):
    """Logits of every position of ``ids`` (teacher forcing, no padding seen), float32."""

    ids: tuple[int, ...]
    kind: ClassVar[str] = "token_logits"
    words: ClassVar[str] = "full-vocabulary logits"
    padding_side: ClassVar[str] = "right"
    max_stored_bytes: ClassVar[int | None] = STORED_BYTES

    def length(self) -> int:
        return len(self.ids)


@dataclass
class TokenLogitsResult(ArrayResult):
    """``logits[t]`` is the model's output after ``ids[: t + 1]`` (``len(ids) x vocab``)."""

    logits: np.ndarray


register_kind(TokenLogits, TokenLogitsResult)
