"""The plugin base class: what a benchmark is.

A benchmark is one object that knows its command-line options, turns them into its
typed :attr:`Benchmark.Config` (the one place an ``argparse.Namespace`` is read),
builds its graph and resources from that config, writes any extra output files and
draws its own report sections. It is found through the ``evaldag.benchmarks`` entry
points (``registry.py``); its menu of metric names is a ``MetricMenu`` (``menu.py``); the
report that draws its sections is ``report.py``. This module imports nothing of drawing:
the drawing types it mentions (``Split``, ``RunFolder``, ``Section``) are ``render/``'s,
named in words, not imported.

A Python user builds the config and calls ``build`` directly::

    nodes, resources = TofuBenchmark().build(TofuConfig(data="TOFU/", model="ckpt/"))
"""

from __future__ import annotations

import argparse
import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pydantic

from .declare import Node
from .hooks import display
from .menu import MetricMenu


@dataclass(frozen=True)
class Tradeoff:
    """A benchmark's trade-off figure for the checkpoints of a training run (the report's
    Training curves): ``y`` on a log scale against ``x``, both SUMMARY names, higher better on
    both (the Pareto front over the checkpoints); runs of the ``reference`` model (a resource
    role, e.g. the retain model) are marked as ``reference_label``."""

    x: str
    y: str
    reference: str | None = None
    reference_label: str = "reference model"

    def pareto(self) -> tuple[tuple[str, str], ...]:
        """The axes of a bare ``pareto`` rule (``selection.py``): higher ``y``, higher ``x``."""
        return (("max", self.y), ("max", self.x))


def pareto_of(benches: Any) -> tuple[tuple[str, str], ...] | None:
    """The first trade-off ``benches`` declare, as a bare ``pareto``'s axes; None without one."""
    return next((t.pareto() for b in benches if (t := getattr(b, "tradeoff", None)) is not None), None)


class Benchmark:
    """Subclass this; register the subclass under the ``evaldag.benchmarks`` entry-point group.

    Class attributes: ``name`` (the CLI word), ``group`` (node group and the prefix of
    ``<GROUP>_EVAL.json``), ``description`` (one line for ``evaldag list``), ``Config``
    (a pydantic model: everything the benchmark reads) and ``metadata`` (e.g. a licence).
    """

    name: ClassVar[str] = ""
    group: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type[pydantic.BaseModel]] = pydantic.BaseModel
    metadata: ClassVar[dict] = {}
    #: the data splits its metric names mention (``forget_Q_A_Prob``): the bands of a graph drawing and
    #: the ``split`` column of ``evaldag export``; the engine knows no split word of its own
    splits: ClassVar[tuple[Any, ...]] = ()  # render.clusters.Split
    #: resource -> the flag that supplies it (the hint when a graph misses that resource)
    resource_flags: ClassVar[dict[str, str]] = {}
    #: True: the benchmark evaluates a model named by ``--model``. The run's options then own
    #: that flag (``engine/options.py``: repeatable, globs, ``@FILE``, a sweep); the benchmark
    #: reads ``args.model`` (one resolved spec, or None) in ``config_from_args``, never declares
    #: ``--model`` itself, and gives each checkpoint of a sweep its config in :meth:`for_model`.
    takes_model: ClassVar[bool] = False
    #: the report's trade-off figure over a training run's checkpoints, None: none
    tradeoff: ClassVar[Tradeoff | None] = None

    def _repr_html_(self) -> str:
        """Jupyter's picture: the plan of the default config, drawn (``notebook.py``; no data or model read)."""
        return display("benchmark_html", self)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this benchmark's own options (the CLI adds --out, --cache-dir, --metrics, ...)."""

    def config_from_args(self, args: argparse.Namespace) -> pydantic.BaseModel:
        """The only place a Namespace is read. Default: every Config field of the same name."""
        return self.Config(**{k: getattr(args, k) for k in self.Config.model_fields if getattr(args, k, None) is not None})

    def for_model(self, config: Any, model: str | None) -> Any:
        """``config`` for another checkpoint of a sweep: a copy whose model is ``model``.
        Default: the ``model`` field replaced, when the benchmark takes a model and has one."""
        if not self.takes_model or "model" not in getattr(type(config), "model_fields", {}):
            return config
        return config.model_copy(update={"model": model})

    def for_retain_model(self, config: Any) -> Any:
        """``config`` for the retain model's own run (relearning's control, ``session_control.py``): a copy
        whose ``model`` is its ``retain_model`` and whose retain model stays itself, as
        ``--model RETAIN --retain-model RETAIN`` gives it (forget quality then compares the retain
        model with itself, 1 by construction, and every metric that reads a retain model is still
        computed, so a control's metrics are the unlearned run's). The retain role's ``--model-arg``
        settings become the model's. None: the config names no retain model (default: no
        ``retain_model`` field, or it is empty)."""
        fields = getattr(type(config), "model_fields", {})
        retain = getattr(config, "retain_model", None) if "retain_model" in fields else None
        if not self.takes_model or "model" not in fields or not retain:
            return None
        update: dict[str, Any] = {"model": retain}
        options = getattr(config, "backend_options", None)
        if "backend_options" in fields and isinstance(options, dict):
            update["backend_options"] = {**options, "model": dict(options.get("retain_model", {}))}
        return config.model_copy(update=update)

    def metric_menu(self) -> MetricMenu:
        return MetricMenu(default=(), all=())

    def plan(self, config: Any) -> list[Node]:
        """The nodes alone: no data read, no model loaded (``evaldag graph``)."""
        return self.build(config)[0]

    def build(self, config: Any) -> tuple[list[Node], dict[str, Any]]:  # pragma: no cover - abstract
        """The nodes and the (lazy) resources they read."""
        raise NotImplementedError

    def write_outputs(self, result: Any, out_dir: str | os.PathLike, config: Any) -> list[Path]:
        """Extra files next to the engine's ``<GROUP>_EVAL.json`` / ``_SUMMARY.json`` / ``run.json``."""
        return []

    def report_sections(self, runs: list[Any]) -> list[Any]:
        """Sections of ``report.html`` (``render.report_html.Section``) drawn from the loaded
        run folders (``render.report_html.RunFolder``); default: none."""
        return []

    def item_sample(self, name: str, evals: dict[str, Any], retain: dict[str, Any] | None = None) -> Any:
        """Metric ``name`` of a published ``<GROUP>_EVAL.json`` (``evals``, the whole file) as an
        ``uncertainty.Sample`` of its items, for ``evaldag compare``'s paired test; ``retain``:
        the reference model's EVAL file the run read (its retain logs), where a metric needs it.
        None: it has no item-based form (default)."""
        return None

    def knowledge(self, name: str) -> Any:
        """The knowledge form (``knowledge.Knowledge``) of metric ``name`` as this benchmark
        configures it, for robustness scores and the meta-evaluation of metrics; None: it
        declares none (default)."""
        return None

    def input_paths(self, config: Any) -> list[tuple[str, Path]]:
        """(option, path) for each file or folder the run reads, so that ``--out`` can never
        be, hold or lie inside one (retain logs cannot be rebuilt). Default: every config
        field whose value (or item) names an existing path; override to add hidden ones."""
        found: list[tuple[str, Path]] = []

        def walk(key: str, v: Any) -> None:
            if isinstance(v, dict):
                for k, item in v.items():
                    walk(str(k), item)
            elif isinstance(v, (list, tuple)):
                for item in v:
                    walk(key, item)
            elif isinstance(v, (str, os.PathLike)) and str(v) and os.path.exists(os.path.expanduser(v)):
                found.append((f"--{key.replace('_', '-')}", Path(os.path.expanduser(v))))

        walk("", config.model_dump() if isinstance(config, pydantic.BaseModel) else {})
        return found

    # helpers for subclasses
    @staticmethod
    def several(args: argparse.Namespace) -> bool:
        """True when one command line runs several benchmarks (``--metrics`` then names theirs too)."""
        return len(getattr(args, "benchmarks", None) or []) > 1

    def metrics_from_args(self, args: argparse.Namespace) -> tuple[str, ...]:
        return self.metric_menu().parse(getattr(args, "metrics", None), bench=self.group or self.name,
                                         strict=not self.several(args))


__all__ = ["Benchmark", "MetricMenu", "Tradeoff", "pareto_of"]
