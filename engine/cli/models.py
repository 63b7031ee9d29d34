"""``--model``: one owner, the command line.

A benchmark that evaluates a model says so (``Benchmark.takes_model = True``) and never
declares ``--model``. When any benchmark a command names takes one, the command declares
it here, once: repeatable, each value a checkpoint folder, a hub id, a glob or ``@FILE``
(``sweep.py``). The command resolves the values into specs (:func:`model_specs`) and
hands each run its own Namespace whose ``model`` is one spec (:func:`for_model`); the
Namespace argparse returned is never rewritten, and a benchmark reads ``args.model`` in
``config_from_args`` like any other option.

The hook for model backends: a spec is a string, today a folder or hub id. Prefixed specs
(``hf:DIR``, ``openai:NAME``, ``replay:FILE``) and their qualifiers (``--tokenizer``,
``--served-model``, ``--api-key-env``, ``--fallback``) belong here too: declare the
qualifiers in :func:`add_model_option` beside ``--model`` (so they exist exactly when a
model does), check or expand a spec in :func:`model_specs` (before anything is built: a
bad one is one ``evaldag: error:`` line), and put what a run needs on the per-run
Namespace in :func:`for_model`; the benchmarks' ``config_from_args`` then read it there.
"""

from __future__ import annotations

import argparse
from typing import Iterable

from ..benchmark import Benchmark
from .sweep import expand_models, shard_arg

DEST = "models"  # argparse's list of the raw --model values; each run sees ``model`` only
HELP = ("the model under evaluation (a checkpoint folder, or a hub id when online); repeat it, or give a glob or "
        "@FILE (one per line), to evaluate several checkpoints: OUT/<name>/ each, one OUT/report.html with a "
        "column per checkpoint")


def takes_model(benches: Iterable[Benchmark]) -> bool:
    return any(getattr(b, "takes_model", False) for b in benches)


def add_model_option(parser: argparse.ArgumentParser, benches: Iterable[Benchmark]) -> None:
    """``--model`` (repeatable) when a named benchmark takes a model; otherwise it is unknown."""
    if takes_model(benches):
        parser.add_argument("--model", dest=DEST, action="append", default=None, metavar="MODEL", help=HELP)
        parser.add_argument("--shard", type=shard_arg, default=None, metavar="I/N",
                            help="run only share I (from 0) of N of the checkpoints --model names (every N-th from "
                                 "the I-th), into OUT/<name>/ as the whole sweep would: one job of an array sharing "
                                 "one --cache-dir; `evaldag report` over the shards' --out folders is the whole sweep")


def model_specs(args: argparse.Namespace) -> list[str | None]:
    """The checkpoints ``--model`` named, in order, each once; ``[None]`` when none was given
    (one run, the benchmark says whether it needs one). Raises OSError / ValueError."""
    return expand_models(getattr(args, DEST, None)) or [None]


def for_model(args: argparse.Namespace, spec: str | None) -> argparse.Namespace:
    """A copy of ``args`` for one run: ``model`` is ``spec`` when the command declared ``--model``."""
    if not hasattr(args, DEST):
        return args
    return argparse.Namespace(**{k: v for k, v in vars(args).items() if k != DEST}, model=spec)
