"""What the unlearning benchmarks (TOFU, MUSE) share as plugins: the model and retain flags,
the config fields every one of them fills the same way, the retain logs as a resource, a
metric menu of defaults plus the ``mia`` and ``token_stats`` groups, the plan and the report's plots.

A subclass names its ``spec`` module and metric lists and supplies only what is its own:
its flags (:meth:`UnlearningBenchmark.add_own_arguments`), its config fields
(:meth:`~UnlearningBenchmark.own_config`) and its data resources
(:meth:`~UnlearningBenchmark.data_resources`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from types import ModuleType
from typing import Any, ClassVar

from ...engine import Node, Value
from ...engine.benchmark import Benchmark, MetricMenu, Tradeoff
from ...engine.option_owners import add_shared
from ...engine.render.report_html import RunFolder, Section
from ...metrics.editing.quantization import check_quantize_extra, nf4_changed_fraction
from ...metrics.unlearning.blind_mia import SKLEARN_EXTRA, sklearn_missing
from .. import common
from ..base_model import add_base_model_argument, base_model_resource, check_weights_readable
from ..prompt_transforms import add_prompt_transform_argument, derived_rows, parse
from ..uncertainty import add_bootstrap_arguments, bootstrap_options
from . import report
from .classifier import add_classifier_arguments, classifier_options, classifier_resource, gated
from .eval_logs import EvalLogs, load_eval_logs
from .serves import note, servable


@functools.cache
def token_stats_metrics(spec: ModuleType) -> tuple[str, ...]:
    """The ``token_stats`` group of ``--metrics``: built once per benchmark and process."""
    return spec.token_stats_metrics()


class UnlearningBenchmark(Benchmark):
    """Base of TofuBenchmark and MuseBenchmark (``spec``: GROUP, nodes(), metric_names())."""

    spec: ClassVar[ModuleType]
    default_metrics: ClassVar[tuple[str, ...]] = ()
    mia_metrics: ClassVar[tuple[str, ...]] = ()
    resource_flags = {**common.RESOURCE_FLAGS, "classifier_model": "--classifier-model DIR|ID",
                      "base_model": "--base-model ORIGINAL_DIR"}
    takes_model = True  # --model is the run's (engine/options.py); model_options reads args.model
    splits = report.SPLITS  # forget, holdout, retain
    #: forget quality (log) against model utility, the retain model marked (TOFU's figure; MUSE has neither name)
    tradeoff = Tradeoff(x="model_utility", y="forget_quality", reference="retain_model", reference_label="retain model")

    def metric_menu(self) -> MetricMenu:
        return MetricMenu(default=self.default_metrics, all=tuple(self.spec.metric_names()),
                          groups={"mia": self.mia_metrics, "token_stats": token_stats_metrics(self.spec)})

    # -- the command line: shared flags, then the benchmark's own
    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        common.add_model_arguments(p)
        add_base_model_argument(p)
        common.add_limit_argument(p)
        add_shared(p, "--mia-blind-baseline", action="store_true",
                       help="TOFU, MUSE: beside the MIAs, the AUC of a model-free classifier (bag of words and length, "
                            "cross-validated, --seed) on their member/non-member rows: mia_blind_baseline says which MIA "
                            "does not beat it (pip install 'evaldag[sklearn]')")
        add_classifier_arguments(p)
        add_bootstrap_arguments(p, "TOFU, MUSE: each metric's interval in <BENCH>_INTERVALS_EVAL.json")
        add_shared(p, "--summary-intervals", action="store_true",
                   help="TOFU, MUSE: with --bootstrap-resamples, the intervals also in <BENCH>_SUMMARY.json (\"intervals\")")
        add_prompt_transform_argument(p, "TOFU splits: forget, retain, ra, wf; MUSE: knowmem_forget, knowmem_retain")
        self.add_own_arguments(p)

    def add_own_arguments(self, p: argparse.ArgumentParser) -> None:
        """``--<name>-data``, ``--<name>-retain-logs`` and whatever else is the benchmark's own."""

    def config_from_args(self, args: argparse.Namespace) -> Any:
        """Model options, metrics, data and retain logs read alike (``--<name>-X`` before ``--X``);
        what ``--metrics all`` left out is said here, once per run."""
        metrics, left = self._served(args)
        if left and not getattr(args, "quiet", False):
            print(note(self.group, left), file=sys.stderr)
        return self.Config(
            **common.model_options(args),
            metrics=metrics,
            data=common.bench_option(args, self.name, "data"),
            retain_logs=common.retain_logs_file(common.bench_option(args, self.name, "retain_logs"), self.group),
            limit=getattr(args, "limit", None),
            base_model=getattr(args, "base_model", None),
            mia_blind_baseline=bool(getattr(args, "mia_blind_baseline", False)),
            prompt_transforms=parse(getattr(args, "prompt_transform", None)),
            **classifier_options(args),
            **bootstrap_options(args, resamples=0, seed=0),
            summary_intervals=bool(getattr(args, "summary_intervals", False)),
            **self.own_config(args),
        )

    def metrics_from_args(self, args: argparse.Namespace) -> tuple[str, ...]:
        """The menu's names; ``all`` brings only what the run's models and logs can serve
        (``serves.py``); the gibberish metrics come only with --classifier-model."""
        return self._served(args)[0]

    def _served(self, args: argparse.Namespace) -> tuple[tuple[str, ...], dict[str, str]]:
        """(the metrics, {what ``all`` left out: the flags that serve it})."""
        words = getattr(args, "metrics", None)
        given = {k: getattr(args, k, None) for k in ("reference_model", "retain_model", "classifier_model")}
        given["retain_logs"] = common.bench_option(args, self.name, "retain_logs")
        names, left = servable(super().metrics_from_args(args), words, given)
        return gated(names, words, bool(given["classifier_model"])), left

    def own_config(self, args: argparse.Namespace) -> dict[str, Any]:
        """The Config fields only this benchmark has, from its own flags."""
        return {}

    # -- the graph and its resources
    def data_resources(self, cfg: Any) -> dict[str, Any]:  # pragma: no cover - abstract
        """The data splits as lazy ``Rows`` (nothing read yet)."""
        raise NotImplementedError

    def eval_logs(self, path: str, metrics: Any) -> EvalLogs:
        """The retain model's logs, checked for the keys ``metrics`` read."""
        return load_eval_logs(path, metrics)

    def graph_config(self, cfg: Any) -> Any:
        """The config the graph is built from (MUSE reads its few-shot rows in here)."""
        return cfg

    def plan(self, cfg: Any) -> list[Node]:
        return self.spec.nodes(cfg.metrics, cfg) + self.weight_nodes(cfg)

    def weight_nodes(self, cfg: Any) -> list[Node]:
        """With ``--base-model``: ``nf4_changed_fraction``, the quantization attack predicted from
        both checkpoints' weights (``metrics/editing/quantization.py``), in ``<GROUP>_EVAL.json``."""
        if not cfg.base_model:
            return []
        return [nf4_changed_fraction().named("nf4_changed_fraction", self.group)]

    def base_model_resource(self, cfg: Any) -> Any:
        """``base_model`` for the weight nodes, checked first (local folders, same shapes, bitsandbytes)."""
        check_weights_readable(cfg.model, cfg.base_model, "nf4_changed_fraction")
        check_quantize_extra()
        return base_model_resource(cfg.base_model, cfg.dtype, cfg.device, cfg.backend_options.get("model", {}).get("tokenizer"),
                                   cfg.backend_options.get("base_model"))

    def build(self, cfg: Any) -> tuple[list[Node], dict[str, Any]]:
        """Data first (a missing folder is the first error), then the retain logs, then the models."""
        if cfg.mia_blind_baseline and sklearn_missing():  # a stated skip: the MIAs themselves need no sklearn
            print(f"evaldag: note: {self.group}: mia_blind_baseline skipped: scikit-learn is not installed "
                  f"({SKLEARN_EXTRA})", file=sys.stderr)
            cfg = cfg.model_copy(update={"mia_blind_baseline": False})
        resources = self.data_resources(cfg)
        self._derive_transformed(cfg, resources)
        # the run's prompt template (--template / --template-args), for a user's scorer to encode
        # with as the built-in scorers do: needs=("model", "data", "template")
        resources["template"] = Value(cfg.template, source="--template")
        if cfg.retain_logs:
            logs = self.eval_logs(cfg.retain_logs, cfg.metrics)
            resources[f"{self.group.lower()}_retain_logs"] = Value(logs.raw, kind="data", source=str(cfg.retain_logs))
        resources.update(common.model_resources(cfg))
        if cfg.base_model:
            resources["base_model"] = self.base_model_resource(cfg)
        classifier = classifier_resource(cfg)
        if classifier is not None:
            resources["classifier_model"] = classifier
        if cfg.retain_model and not cfg.reference_model and "mia_reference" in cfg.metrics:
            # the demo's choice, said aloud: the retain model is the natural reference
            print("evaldag: note: --reference-model not given: the Reference attack (mia_reference) uses "
                  f"--retain-model {cfg.retain_model}", file=sys.stderr)
            resources["reference_model"] = common.hf_model(cfg.retain_model, cfg, "--retain-model")
        self._warn_tokenizers(cfg)
        return self.spec.nodes(cfg.metrics, self.graph_config(cfg)) + self.weight_nodes(cfg), resources

    def _derive_transformed(self, cfg: Any, resources: dict[str, Any]) -> None:
        """Each prompt transform's derived splits (the questions rewritten; lazy, read only if a metric
        reads them), and a note for each selected generation metric a transform cannot rewrite."""
        cat = self.spec.CATALOGUE(cfg)
        for name, derived in cat.transforms.items():
            for split, copy in derived.items():
                resources[copy] = derived_rows(resources[split], name)
        for entry, metric, splits in cat.not_repeated(cfg.metrics):
            print(f"evaldag: note: {self.group}: --prompt-transform {entry} does not repeat {metric}: its rows "
                  f"({', '.join(splits)}) are passages to continue, not questions", file=sys.stderr)

    def added_config(self, path: Any, cfg: Any, resources: dict[str, Any], added: dict[str, Node]) -> Any:
        """``--add-metric FILE.yaml``: an open-unlearning metric config whose ``# @package
        eval.<name>.metrics.NAME`` line names this benchmark -> (node, resources), else None."""
        from ...metrics.unlearning.open_unlearning_compat_config import RunSide, config_node, read_config

        ou = read_config(path)
        if ou.bench != self.name:
            return None
        gcfg = self.graph_config(cfg)
        values = {f"eval.{self.name}.{k}": v for k, v in self.config_values(cfg).items()}
        side = RunSide(self.group, frozenset(self.spec.metric_names()), lambda n: self.spec.nodes([n], gcfg)[0], values,
                       f"{self.group.lower()}_retain_logs" if cfg.retain_logs else None, resources, added)
        return config_node(ou, side)

    def config_values(self, cfg: Any) -> dict[str, Any]:
        """What ``${eval.<name>.<field>}`` means in an open-unlearning config (its evaluator's fields)."""
        return {"batch_size": 32, "question_key": "question", "retain_logs_path": cfg.retain_logs}

    def _warn_tokenizers(self, cfg: Any) -> None:
        """One line per side model whose tokenizer differs from --model's, naming the metrics
        that then compare scores computed on different tokenizations."""
        ref = cfg.reference_model or cfg.retain_model
        sides = [("--retain-model", cfg.retain_model, "retain_model", ("forget_quality", "privleak")),
                 ("--reference-model" if cfg.reference_model else "--retain-model", ref, "reference_model", ("mia_reference",))]
        mine = common.tokenizer_files(cfg.model, cfg.backend_options.get("model", {}).get("tokenizer"))
        warned: dict[str, list[str]] = {}
        for flag, path, role, metrics in sides:
            names = [m for m in metrics if m in cfg.metrics]
            theirs = common.tokenizer_files(path, cfg.backend_options.get(role, {}).get("tokenizer"))
            if names and mine is not None and theirs is not None and not common.same_tokenizer_files(mine, theirs):
                warned.setdefault(f"{flag} {path}", []).extend(names)
        for side, names in warned.items():
            verb = "compares" if len(names) == 1 else "compare"
            print(f"evaldag: warning: {side} has a different tokenizer than --model {cfg.model}: {', '.join(names)} "
                  f"then {verb} scores computed on different tokenizations", file=sys.stderr)

    def item_sample(self, name: str, evals: dict[str, Any], retain: dict[str, Any] | None = None) -> Any:
        """The metric's items from an EVAL file, as its interval reads them (None: no per-item
        values there: forget quality and privleak need the retain side, ``retain``, the retain
        logs' EVAL file the run read; model utility its nine parts)."""
        from ...metrics.unlearning.intervals import sample_of
        from ...metrics.unlearning.utility import MODEL_UTILITY_PARTS

        kind = self.spec.interval_kind(name)
        if kind is None or (kind in ("ks", "privleak") and not isinstance(retain, dict)):
            return None
        if kind in ("ks", "privleak"):
            part = "forget_truth_ratio" if kind == "ks" else "mia_min_k"
            parents = {"forget": evals.get(part), "retain": retain.get(part)}
        elif kind == "hmean":
            parents = {p: evals.get(p) for p in MODEL_UTILITY_PARTS}
        else:
            parents = {"metric": evals.get(name)}
        if any(not isinstance(b, dict) for b in parents.values()):
            return None
        try:
            return sample_of(kind, parents)
        except (ValueError, KeyError, TypeError):
            return None

    def write_outputs(self, result: Any, out_dir: Any, config: Any) -> list:
        """With ``--retain-model``: the retain side's per-item values in ``<GROUP>_RETAIN_LOGS.json``
        (``retain_side.py``). With ``--summary-intervals``: each interval of ``<GROUP>_INTERVALS`` also in
        ``<GROUP>_SUMMARY.json`` under ``"intervals"`` (the numbers keep their keys and values)."""
        from ...engine.outputs import add_to_summary
        from .catalogue import INTERVALS
        from .retain_side import write_retain_logs

        written = write_retain_logs(result, out_dir, self.group.upper())
        if not (getattr(config, "summary_intervals", False) and getattr(config, "bootstrap_resamples", 0)):
            return written
        ivs = {n: r.to_dict() for n, r in result.results(self.group.upper() + INTERVALS).items() if hasattr(r, "to_dict")}
        keep = ("percentile", "BCa", "confidence_level", "n_resamples", "seed")
        return [*written, add_to_summary(out_dir, self.group, "intervals", {n: {k: b.get(k) for k in keep} for n, b in sorted(ivs.items())})]

    def knowledge(self, name: str) -> Any:
        """The form its metric declares (``@metric(knowledge=...)``) for the node this benchmark
        builds under ``name`` (the truth ratio's depends on its aggregator); None: none, or no
        such metric."""
        from ...engine.knowledge import of_node

        from ..prompt_transforms import available

        if name not in self.spec.metric_names():  # on a prompt-transformed set (Jailbreak-ROUGE): its parent's form
            name = self.spec.CATALOGUE(self.Config(prompt_transforms=tuple(available()))).parent_of(name) or name
        if name not in self.spec.metric_names():
            return None
        return of_node(self.spec.nodes((name,))[0])

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        return report.report_sections(runs)
