"""evaldag's engine: declare metrics, build the graph, run it with a shared cache.

The public API (one page; see docs/writing-a-metric.md)::

    metric, provider, Metric, Params      declare metrics, providers, parameters
    Result                                what a metric returns
    Graph, run, RunResult                 build and run a graph
    Cache, default_cache_dir              the on-disk cache
    TokenStats, Generate, GenerationSettings, HiddenStates, GradNorm   requests
    Rows, Value                           wrap data for binding as resources
    write_report                          <BENCH>_EVAL.json, _SUMMARY.json, run.json
"""

from .adapters.hf import HFModel
from .declare import REGISTRY, DeclarationError, Metric, MetricDef, Node, NoParams, Params, metric, provider
from .graph import Graph, GraphError
from .requests import (
    Generate, GenerationSettings, GradNorm, HiddenStates, Request, TokenStats, TokenStatsResult, pack_token_stats,
    unpack_token_stats,
)
from .resources import MissingResource, Rows, Value
from .cache import Cache, default_cache_dir
from .outputs import write as write_report
from .results import Result, RunResult
from .run import run

__all__ = [
    "REGISTRY", "DeclarationError", "Metric", "MetricDef", "Node", "NoParams", "Params", "metric", "provider",
    "Graph", "GraphError", "write_report", "Generate", "GenerationSettings", "GradNorm", "HiddenStates",
    "Request", "TokenStats", "MissingResource", "Rows", "Value", "Result", "RunResult", "run", "Cache",
    "default_cache_dir", "HFModel", "TokenStatsResult", "pack_token_stats", "unpack_token_stats",
]
