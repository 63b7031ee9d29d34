"""Word-embedding fairness metrics with WEFE 1.0.1's numbers (WEAT, RND, RNSB, MAC, ECT, RIPA).

One module per metric holds its formula (a pure function of a ``QueryLookup``), its
graph node(s) and its builder, registered by name in ``registry``. Shared pieces:
``vectors`` (``WordVectors``), ``embeddings`` (loading them, the ``embeddings``
resource), ``query`` (``Query``), ``lookup`` (WEFE's word -> vector lookup),
``word_sets`` (the set and lookup nodes), ``cosine`` (WEFE's cosine recipes),
``logistic`` (liblinear's solver, for RNSB) and ``wefe_compat`` (WEFE's API on top).
``docs/fairness-notes.md`` lists the WEFE quirks kept for fidelity.

Importing the package imports every module in it, so a metric module registers itself
just by being here: adding a metric is one file (and its test), see docs/fairness.md.
"""

import importlib
import pkgutil

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

for _module in pkgutil.iter_modules(__path__):  # the rest: a new metric's module registers on import
    importlib.import_module(f"{__name__}.{_module.name}")

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
