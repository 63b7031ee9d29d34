"""``evaldag run weat``: WEFE's metrics on word embeddings, or on a model's input embeddings.

    evaldag run weat --embeddings vectors.npz [--queries my_sets.json] [--metrics WEAT,RNSB]
    evaldag run weat --model ./checkpoint     # the model's input-embedding rows (see metrics/fairness/word_sets.py)

Without ``--metrics`` each query runs every metric whose template takes it. With it,
every named metric must take every query: a mismatch is an error before any work.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ...engine import Node
from ...engine.benchmark import Benchmark, MetricMenu
from ...engine.argtypes import fraction, positive_int
from ...engine.render.report_html import RunFolder, Section
from ...metrics.fairness.embeddings import WordVectorsResource, guess_format
from ...metrics.fairness.lookup import LookupOptions
from ...metrics.fairness.registry import MetricSettings, metric_names
from ...metrics.fairness.rnd import RndParams
from ...metrics.fairness.rnsb import RnsbParams
from ...metrics.fairness.weat import WeatOptions
from ...metrics.fairness.weat_p_value import PValueParams
from .. import common
from . import report, spec
from .config import WeatConfig


class WeatBenchmark(Benchmark):
    name = "weat"
    group = spec.GROUP
    description = "WEAT/WEFE (Caliskan et al. 2017): WEAT, RND, RNSB, MAC, ECT, RIPA on word embeddings or a model's"
    Config = WeatConfig
    metadata = {"word_sets": "WEFE's WEAT word sets (MIT), see benchmarks/weat/README.md"}
    resource_flags = {"embeddings": "--embeddings FILE", "model": "--model DIR"}
    takes_model = True  # --model: vectors from its input embeddings (the flag is the CLI's)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        common.add_model_arguments(p, retain=False, prompt=False)  # --dtype, --device
        g = p.add_argument_group("weat")
        g.add_argument("--embeddings", default=None, help="WEAT: word vectors (.npz with words/vectors, word2vec text/GloVe, word2vec .bin; gzip ok)")
        g.add_argument("--embeddings-format", choices=["npz", "text", "binary"], default=None, help="WEAT: reader for --embeddings (default: from the file name)")
        g.add_argument("--queries", default=None, help="WEAT: word-set JSON (query id -> target/attribute sets and names); default: the standard WEAT tests")
        g.add_argument("--lost-vocabulary-threshold", type=fraction, default=0.2, help="WEAT: a set losing more than this fraction makes the query NaN")
        g.add_argument("--preprocessors", default="[{}]", help='WEAT: WEFE preprocessors as JSON, e.g. \'[{}, {"lowercase": true}]\'')
        g.add_argument("--strategy", choices=["first", "all"], default="first", help="WEAT: keep the first preprocessed variant found, or all")
        g.add_argument("--normalize", action="store_true", help="WEAT: divide every vector by its norm first")
        g.add_argument("--return-effect-size", action="store_true", help="WEAT: report WEAT's effect size as its result")
        g.add_argument("--p-value-method", choices=["auto", "exact", "monte_carlo", "wefe", "none"], default="auto",
                       help="WEAT: exact permutation test when the splits are few, else seeded Monte Carlo (auto); 'wefe' = WEFE's sampler")
        g.add_argument("--p-value-iterations", type=positive_int, default=10000, help="WEAT: permutations for monte_carlo / wefe")
        g.add_argument("--p-value-test-type", choices=["right-sided", "left-sided", "two-sided"], default="right-sided",
                       help="WEAT: which tail the permutation p-value counts (WEFE's test_type)")
        g.add_argument("--random-state", type=int, default=0, help="WEAT: seed of the sampled p-values and of RNSB's splits")
        g.add_argument("--rnd-distance", choices=["norm", "cos"], default="norm", help="WEAT: RND's distance (cos is a similarity)")
        g.add_argument("--leading-space", action="store_true", help="WEAT with --model: tokenize ' word' (mid-sentence form)")

    def config_from_args(self, args: argparse.Namespace) -> WeatConfig:
        names = self.metrics_from_args(args)
        models = common.model_options(args)
        if args.embeddings and args.model:
            if not self.several(args):
                raise ValueError("weat: give --embeddings FILE or --model DIR, not both")
            models["model"] = None  # --model is the other benchmarks'; WEAT reads the embeddings file
        return WeatConfig(
            **models,
            queries=args.queries,
            metrics=None if _everything(args.metrics) or not names else names,
            embeddings=args.embeddings,
            embeddings_format=args.embeddings_format,
            leading_space=args.leading_space,
            lookup=_lookup(args),
            settings=_settings(args),
        )

    def for_model(self, config: WeatConfig, model: str | None) -> WeatConfig:
        """Another checkpoint of a sweep; with --embeddings, --model is the other benchmarks' and
        WEAT reads the file (``config_from_args`` said so already)."""
        return config if config.embeddings else super().for_model(config, model)

    def metric_menu(self) -> MetricMenu:
        # default: every metric whose template takes the query (the config's metrics=None)
        return MetricMenu(default=(), all=metric_names(), case_sensitive=False,
                          note="per query, every metric whose template takes it (names are case-insensitive)")

    def plan(self, cfg: WeatConfig) -> list[Node]:
        return spec.nodes(spec.load_queries(cfg.queries), cfg.metrics, cfg)

    def build(self, cfg: WeatConfig) -> tuple[list[Node], dict[str, Any]]:
        nodes = spec.nodes(spec.load_queries(cfg.queries), cfg.metrics, cfg)
        if cfg.embeddings:
            vectors = WordVectorsResource(cfg.embeddings, format=cfg.embeddings_format)
            if (cfg.embeddings_format or guess_format(cfg.embeddings)) == "npz":
                vectors.value()  # cheap to read: a malformed file is one error now, not one per node
            resources = {"embeddings": vectors}
        elif cfg.model:
            resources = {"model": common.hf_model(cfg.model, cfg)}
        else:
            raise ValueError("weat needs --embeddings FILE (word vectors) or --model DIR (its input embeddings)")
        return nodes, resources

    def write_outputs(self, result: Any, out_dir: str | os.PathLike, config: Any = None) -> list[Path]:
        """``WEAT_EVAL.json`` as ``{query: {metric: fields}}`` (replacing the flat one) and ``WEAT_LOOKUP.json``."""
        return spec.write_outputs(result, out_dir, self.group)

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        return report.report_sections(runs)


def _everything(text: str | None) -> bool:
    """``--metrics`` left out, ``default`` or ``all``: each query runs what its template takes."""
    return not text or text.strip().lower() in ("default", "all")


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
