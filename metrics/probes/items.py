"""GenderBench's object model: a ProbeItem groups Prompts; each Prompt gets Attempts.

``ProbeItem(prompts, num_repetitions, metadata)`` creates ``len(prompts) *
num_repetitions`` attempts, prompt-major then repetition, as GenderBench 1.1.0 does. An
:class:`Attempt` carries the generated ``answer`` and the evaluator's ``evaluation``
(with ``evaluation_undetected``). Items are the unit the bootstrap resamples.

Unlike GenderBench, identities are positions (item index, prompt index, repetition),
not random UUIDs, so the same probe parameters always give equal, hashable items.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional


class Prompt:
    """One input text for a generator, with optional metadata the evaluator may read."""

    __slots__ = ("text", "metadata")

    def __init__(self, text: str, metadata: Optional[dict[str, Any]] = None) -> None:
        self.text = text
        self.metadata = metadata

    def to_json_dict(self) -> dict:
        return {"text": self.text, "metadata": self.metadata}

    @classmethod
    def from_json_dict(cls, d: dict) -> "Prompt":
        return cls(text=d["text"], metadata=d.get("metadata"))

    def __repr__(self) -> str:
        return f"Prompt({self.text[:40]!r}...)"


class Attempt:
    """One call of the generator on ``prompt``; ``repetition_id`` tells repetitions apart."""

    __slots__ = ("prompt", "repetition_id", "answer", "evaluation", "evaluation_undetected")

    def __init__(self, prompt: Prompt, repetition_id: int) -> None:
        self.prompt = prompt
        self.repetition_id = repetition_id
        self.answer: Optional[str] = None
        self.evaluation: Any = None
        self.evaluation_undetected: Optional[bool] = None

    def evaluate(self, evaluator: Any) -> Any:
        """Store and return ``evaluator(self)`` (GenderBench's ``Attempt.evaluate``)."""
        self.evaluation = evaluator(self)
        return self.evaluation

    def to_json_dict(self) -> dict:
        return {
            "repetition_id": self.repetition_id,
            "answer": self.answer,
            "evaluation": self.evaluation,
            "evaluation_undetected": self.evaluation_undetected,
        }


class ProbeItem:
    """A test item: related prompts whose attempts are scored together."""

    __slots__ = ("prompts", "num_repetitions", "metadata", "attempts")

    def __init__(self, prompts: list[Prompt], num_repetitions: int, metadata: Optional[dict[str, Any]] = None) -> None:
        if num_repetitions < 1:
            raise ValueError(f"num_repetitions must be >= 1, got {num_repetitions}")
        self.prompts = prompts
        self.num_repetitions = num_repetitions
        self.metadata = metadata
        self.attempts: list[Attempt] = [Attempt(p, r) for p in prompts for r in range(num_repetitions)]

    def attempt_keys(self) -> Iterator[tuple[int, int]]:
        """(prompt index, repetition) of each attempt, in attempt order."""
        for i in range(len(self.prompts)):
            for r in range(self.num_repetitions):
                yield i, r

    def to_json_dict(self) -> dict:
        return {
            "num_repetitions": self.num_repetitions,
            "metadata": self.metadata,
            "prompts": [p.to_json_dict() for p in self.prompts],
            "attempts": [a.to_json_dict() for a in self.attempts],
        }

    @classmethod
    def from_json_dict(cls, d: dict) -> "ProbeItem":
        item = cls([Prompt.from_json_dict(p) for p in d["prompts"]], d["num_repetitions"], d.get("metadata"))
        for attempt, a in zip(item.attempts, d.get("attempts") or []):
            attempt.answer = a.get("answer")
            attempt.evaluation = a.get("evaluation")
            attempt.evaluation_undetected = a.get("evaluation_undetected")
        return item

    def __repr__(self) -> str:
        return f"ProbeItem({len(self.prompts)} prompts x {self.num_repetitions}, {self.metadata})"
