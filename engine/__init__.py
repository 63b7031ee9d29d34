"""evaldag's engine: declare metrics, build the graph, run it with a shared cache.

The public API is what docs/writing-a-metric.md explains, nothing more::

    metric, provider, Metric, Params, Node     declare metrics, providers, parameters; a configured metric
    DeclarationError, GraphError               bad declarations / graphs, raised before any model loads
    Result                                     what a metric returns
    Graph, run, RunResult                      build and run a graph
    Cache                                      the on-disk cache (run(..., cache=))
    TokenStats, Generate, GenerationSettings, HiddenStates   requests a scorer yields
    TokenStatsResult, pack_token_stats, unpack_token_stats             per-token statistics and their reader
    Rows, Value                                wrap data for binding as resources
    HFModel, PromptTemplate                    a transformers checkpoint as a resource; QA prompt tags
    write_report, write_outputs                <GROUP>_EVAL.json, _SUMMARY.json, run.json (+ report.html: write_report)

Everything else is imported from its module (``evaldag.engine.declare.REGISTRY``,
``evaldag.engine.resources.MissingResource``, ...).
"""

from .adapters.base import PromptTemplate
from .adapters.hf import HFModel
from .declare import DeclarationError, InputError, Metric, Node, Params, metric, provider
from .graph import Graph, GraphError
from .requests import (
    Generate, GenerationSettings, HiddenStates, TokenStats, TokenStatsResult, pack_token_stats,
    unpack_token_stats,
)
from .resources import Rows, Value
from .cache import Cache
from .report import write_outputs, write_report
from .results import Result, RunResult
from .run import run

__all__ = [
    "metric", "provider", "Metric", "Params", "Node", "DeclarationError", "InputError", "GraphError",
    "Result", "Graph", "run", "RunResult", "Cache",
    "TokenStats", "Generate", "GenerationSettings", "HiddenStates",
    "TokenStatsResult", "pack_token_stats", "unpack_token_stats",
    "Rows", "Value", "HFModel", "PromptTemplate", "write_report", "write_outputs",
]
