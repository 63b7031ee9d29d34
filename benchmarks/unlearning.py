"""What the unlearning benchmarks (TOFU, MUSE) share as plugins: the model options'
missing-resource hints, a metric menu of defaults plus the ``mia`` group, the plan and
the report's plots. Each subclass names its ``spec`` module and its metric lists."""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

from ..engine import Node
from ..engine.benchmark import Benchmark, MetricMenu, RunFolder, Section
from . import common, unlearning_report


class UnlearningBenchmark(Benchmark):
    """Base of TofuBenchmark and MuseBenchmark (``spec``: GROUP, nodes(), metric_names())."""

    spec: ClassVar[ModuleType]
    default_metrics: ClassVar[tuple[str, ...]] = ()
    mia_metrics: ClassVar[tuple[str, ...]] = ()
    resource_flags = common.RESOURCE_FLAGS

    def metric_menu(self) -> MetricMenu:
        return MetricMenu(default=self.default_metrics, all=tuple(self.spec.metric_names()), groups={"mia": self.mia_metrics})

    def plan(self, cfg: Any) -> list[Node]:
        return self.spec.nodes(cfg.metrics, cfg)

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        return unlearning_report.report_sections(runs)
