"""The toy benchmark: a handful of question/answer rows, the toy metric graph, the toy model.

``evaldag run toy`` runs it offline in a second; it is also the smallest example of a
:class:`~evaldag.engine.benchmark.Benchmark` plugin.
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..engine import Node, Rows
from ..engine.adapters.toy import ToyModel
from ..engine.benchmark import Benchmark, MetricMenu
from ..metrics import toy as toy_metrics

ROWS = [
    {"question": "What colour is the sky?", "answer": "The sky is blue."},
    {"question": "What do bees make?", "answer": "Bees make honey."},
    {"question": "Where do fish live?", "answer": "Fish live in water."},
    {"question": "What is ice made of?", "answer": "Ice is frozen water."},
    {"question": "How many legs has a cat?", "answer": "A cat has four legs."},
    {"question": "What do cows eat?", "answer": "Cows eat grass."},
]

DEFAULT_METRICS = ("toy_probability", "toy_min_k", "toy_first_char_match", "toy_summary")


class ToyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics: tuple[str, ...] = DEFAULT_METRICS
    seed: int = 0  # the bigram model's weights


def nodes(metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS) -> list[Node]:
    return [getattr(toy_metrics, m)(name=m, group="TOY") for m in metrics]


def resources(seed: int = 0) -> dict:
    return {"model": ToyModel(seed=seed), "data": Rows(lambda: ROWS, source="evaldag.benchmarks.toy")}


class ToyBenchmark(Benchmark):
    name = "toy"
    group = "TOY"
    description = "six questions on a seeded bigram model: the engine end to end, offline, in a second"
    Config = ToyConfig

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--toy-seed", type=int, default=0, help="toy: seed of the bigram model's weights")

    def config_from_args(self, args: argparse.Namespace) -> ToyConfig:
        return ToyConfig(metrics=self.metrics_from_args(args), seed=args.toy_seed)

    def metric_menu(self) -> MetricMenu:
        return MetricMenu(default=DEFAULT_METRICS, all=DEFAULT_METRICS)

    def plan(self, cfg: ToyConfig) -> list[Node]:
        return nodes(cfg.metrics)

    def build(self, cfg: ToyConfig) -> tuple[list[Node], dict[str, Any]]:
        return nodes(cfg.metrics), resources(seed=cfg.seed)
