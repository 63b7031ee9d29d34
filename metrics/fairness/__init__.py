"""Word-embedding fairness metrics with WEFE 1.0.1's numbers (WEAT, RND, RNSB, MAC, ECT, RIPA).

One module per metric holds its formula (a pure function of a ``QueryLookup``) and
its graph node, declared once with ``registry.fairness_metric`` (the engine metric and
its entry in the name -> builder registry). Shared pieces:
``vectors`` (``WordVectors``), ``embeddings`` (loading them, the ``embeddings``
resource), ``query`` (``Query``), ``lookup`` (WEFE's word -> vector lookup),
``word_sets`` (the set and lookup nodes), ``cosine`` (WEFE's cosine recipes),
``logistic`` (liblinear's solver, for RNSB) and ``wefe_compat`` (WEFE's API on top).
``docs/fairness-notes.md`` lists the WEFE quirks kept for fidelity.

A metric module registers itself just by being here: ``evaldag.metrics``'
``register_builtin`` imports every module of the library (as for every other family),
and the registry asks for that before it answers. Adding a metric is one file (and
its test), see docs/fairness.md.
"""

from .ect import ect
from .embeddings import as_word_vectors, load_embeddings
from .lookup import LookupOptions, QueryLookup, lookup_query
from .mac import mac
from .query import Query
from .registry import MetricSettings, TemplateError, check_template, metric_names, query_nodes
from .ripa import RipaPairingError, ripa
from .rnd import rnd
from .rnsb import rnsb
from .vectors import WordVectors
from .weat import weat

__all__ = [
    "LookupOptions",
    "MetricSettings",
    "Query",
    "QueryLookup",
    "RipaPairingError",
    "TemplateError",
    "WordVectors",
    "as_word_vectors",
    "check_template",
    "ect",
    "load_embeddings",
    "lookup_query",
    "mac",
    "metric_names",
    "query_nodes",
    "ripa",
    "rnd",
    "rnsb",
    "weat",
]
