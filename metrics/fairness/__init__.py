"""Word-embedding fairness metrics with WEFE 1.0.1's numbers (WEAT, RND, RNSB, MAC, ECT, RIPA).

Pure numpy/scipy functions that the graph nodes call: ``embeddings`` loads vectors,
``lookup`` maps a query's words to vectors (WEFE's preprocessing and lost-vocabulary
rule), and each metric takes the resulting ``QueryLookup``. ``docs/fairness-notes.md``
lists the WEFE quirks kept for fidelity.
"""

from .embeddings import as_word_vectors, load_embeddings
from .lookup import Query, QueryLookup, lookup_query
from .rnsb import rnsb
from .vector_metrics import RipaPairingError, ect, mac, ripa, rnd
from .weat import weat
from .wefe_math import TEMPLATES, TemplateError, check_template
from .word_vectors import WordVectors

__all__ = [
    "TEMPLATES",
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
    "ripa",
    "rnd",
    "rnsb",
    "weat",
]
