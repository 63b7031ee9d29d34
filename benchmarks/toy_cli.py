"""Command-line glue for the toy benchmark (``evaldag run`` with no arguments)."""

from __future__ import annotations

import argparse

from . import toy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--toy-seed", type=int, default=0, help="toy: seed of the bigram model's weights")


def build(args: argparse.Namespace):
    metrics = tuple(args.metrics.split(",")) if args.metrics else toy.DEFAULT_METRICS
    return toy.nodes(metrics), toy.resources(seed=args.toy_seed)
