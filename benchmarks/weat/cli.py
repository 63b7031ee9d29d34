"""``evaldag run weat``: WEFE's metrics on word embeddings, or on a model's input embeddings.

    evaldag run weat --embeddings vectors.npz [--queries my_sets.json] [--metrics WEAT,RNSB]
    evaldag run weat --model ./checkpoint     # the model's input-embedding rows (see hf_embeddings.py)

Without ``--metrics`` each query runs every metric whose template takes it. With it,
every named metric must take every query: a mismatch is an error before any work.
``write_outputs`` is the hook the engine's CLI calls after its own report files.
"""

from __future__ import annotations

import argparse
import json

from ...metrics.fairness.embeddings import WordVectorsResource
from ...metrics.fairness.lookup import LookupOptions
from ...metrics.fairness.registry import MetricSettings, metric_names
from ...metrics.fairness.rnd import RndParams
from ...metrics.fairness.rnsb import RnsbParams
from ...metrics.fairness.weat import WeatOptions
from ...metrics.fairness.weat_p_value import PValueParams
from ...metrics.fairness.word_sets import HFSource
from .. import common
from . import spec
from .spec import write_outputs

__all__ = ["add_arguments", "build", "write_outputs"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_model_arguments(p)  # --model: vectors from a checkpoint's input embeddings
    g = p.add_argument_group("weat")
    g.add_argument("--embeddings", default=None, help="WEAT: word vectors (.npz with words/vectors, word2vec text/GloVe, word2vec .bin; gzip ok)")
    g.add_argument("--embeddings-format", choices=["npz", "text", "binary"], default=None, help="WEAT: reader for --embeddings (default: from the file name)")
    g.add_argument("--queries", default=None, help="WEAT: word-set JSON (query id -> target/attribute sets and names); default: the standard WEAT tests")
    g.add_argument("--lost-vocabulary-threshold", type=float, default=0.2, help="WEAT: a set losing more than this fraction makes the query NaN")
    g.add_argument("--preprocessors", default="[{}]", help='WEAT: WEFE preprocessors as JSON, e.g. \'[{}, {"lowercase": true}]\'')
    g.add_argument("--strategy", choices=["first", "all"], default="first", help="WEAT: keep the first preprocessed variant found, or all")
    g.add_argument("--normalize", action="store_true", help="WEAT: divide every vector by its norm first")
    g.add_argument("--return-effect-size", action="store_true", help="WEAT: report WEAT's effect size as its result")
    g.add_argument("--p-value-method", choices=["auto", "exact", "monte_carlo", "wefe", "none"], default="auto",
                   help="WEAT: exact permutation test when the splits are few, else seeded Monte Carlo (auto); 'wefe' = WEFE's sampler")
    g.add_argument("--p-value-iterations", type=int, default=10000, help="WEAT: permutations for monte_carlo / wefe")
    g.add_argument("--p-value-test-type", choices=["right-sided", "left-sided", "two-sided"], default="right-sided")
    g.add_argument("--random-state", type=int, default=0, help="WEAT: seed of the sampled p-values and of RNSB's splits")
    g.add_argument("--rnd-distance", choices=["norm", "cos"], default="norm", help="WEAT: RND's distance (cos is a similarity)")
    g.add_argument("--leading-space", action="store_true", help="WEAT with --model: tokenize ' word' (mid-sentence form)")


def build(args: argparse.Namespace):
    queries = spec.load_queries(args.queries)
    cfg = spec.WeatConfig(lookup=_lookup(args), settings=_settings(args), source=_source(args))
    resources = _resources(args)
    return spec.nodes(queries, _metrics(args), cfg), resources


def _metrics(args: argparse.Namespace) -> list[str] | None:
    if not args.metrics or args.metrics.strip().lower() in ("default", "all"):
        return None
    canonical = {m.lower(): m for m in metric_names()}
    names = [m.strip() for m in args.metrics.split(",") if m.strip()]
    unknown = [m for m in names if m.lower() not in canonical]
    alone = len(args.benchmarks or []) <= 1  # with several benchmarks, --metrics names theirs too
    if unknown and alone:
        raise ValueError(f"unknown WEAT metric(s) {unknown}; known: {', '.join(metric_names())}")
    chosen = [canonical[m.lower()] for m in names if m.lower() in canonical]
    return chosen or None


def _lookup(args: argparse.Namespace) -> LookupOptions:
    try:
        pre = json.loads(args.preprocessors)
    except ValueError as e:
        raise ValueError(f"--preprocessors is not JSON: {e}") from None
    if not isinstance(pre, list):
        raise ValueError('--preprocessors is a JSON list of objects, e.g. \'[{}, {"lowercase": true}]\'')
    return LookupOptions(lost_vocabulary_threshold=args.lost_vocabulary_threshold, preprocessors=pre,
                         strategy=args.strategy, normalize=args.normalize)


def _settings(args: argparse.Namespace) -> MetricSettings:
    p_value = PValueParams(
        method="auto" if args.p_value_method == "none" else args.p_value_method,
        test_type=args.p_value_test_type, iterations=args.p_value_iterations, random_state=args.random_state)
    weat = WeatOptions(return_effect_size=args.return_effect_size,
                       calculate_p_value=args.p_value_method != "none", p_value=p_value)
    return MetricSettings(weat=weat, rnd=RndParams(distance=args.rnd_distance),
                          rnsb=RnsbParams(random_state=args.random_state))


def _source(args: argparse.Namespace):
    if args.embeddings:
        return "embeddings"
    return HFSource(leading_space=args.leading_space)


def _resources(args: argparse.Namespace) -> dict:
    if args.embeddings:
        return {"embeddings": WordVectorsResource(args.embeddings, format=args.embeddings_format)}
    if args.model:
        return {"model": common.model(args.model, args)}
    raise ValueError("weat needs --embeddings FILE (word vectors) or --model DIR (its input embeddings)")
