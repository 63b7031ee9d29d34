"""The toy benchmark: a handful of question/answer rows and the toy metric graph."""

from __future__ import annotations

from ..engine import Node, Rows

ROWS = [
    {"question": "What colour is the sky?", "answer": "The sky is blue."},
    {"question": "What do bees make?", "answer": "Bees make honey."},
    {"question": "Where do fish live?", "answer": "Fish live in water."},
    {"question": "What is ice made of?", "answer": "Ice is frozen water."},
    {"question": "How many legs has a cat?", "answer": "A cat has four legs."},
    {"question": "What do cows eat?", "answer": "Cows eat grass."},
]

DEFAULT_METRICS = ("toy_probability", "toy_min_k", "toy_first_char_match", "toy_summary")


def nodes(metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS) -> list[Node]:
    from ..metrics import toy  # registers the toy metrics

    return [getattr(toy, m)(name=m, group="TOY") for m in metrics]


def resources(seed: int = 0) -> dict:
    from ..engine.adapters.toy import ToyModel

    return {"model": ToyModel(seed=seed), "data": Rows(lambda: ROWS, source="evaldag.benchmarks.toy")}
