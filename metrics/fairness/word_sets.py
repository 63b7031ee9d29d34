"""Word sets and queries as nodes: each set looked up once, each query's NaN rule decided once.

::

    wefe_word_set(words)      one per (word set, lookup settings): found / missing words and
                              their vectors; needs the ``embeddings`` resource
    wefe_word_set_hf(words)   the same from a model's input embeddings (a scorer, below)
    wefe_lookup(query)        one per query: its sets, named, under the lost-vocabulary
                              rule; the NaN ``reason`` is decided here, once

A set node knows nothing of queries: its identity is the words, the lookup settings
and the vectors, so every query that uses the same set alike reads the same vertex
(WEAT 6 to 8 reuse attribute sets; a user's queries reuse far more). ``set_node`` and
``lookup_node`` build them; every metric's builder takes the query's lookup node.

The store keeps values without pickle (JSON + arrays), so ``SetLookup`` and
``QueryLookup`` travel between nodes as dicts of lists and one float32 matrix per set
(``set_value``, ``lookup_value``) and are rebuilt where a metric needs them
(``lookup_from_value``).

Vectors from a model: Reading an embedding row is model work, so it goes where all model work goes: the
set node below is a *scorer*. It tokenizes each word with the model's tokenizer
(tokenizer only, no weights), yields one ``HiddenStates(ids=(token,), layers=(0,))``
request per distinct token, and averages the rows of a word's tokens. The executor
deduplicates those requests across every set and query of the run, serves repeats
from the request cache (per model, forever), and loads the weights only on a miss.

What a word's vector is, exactly:

* ``tokenizer(word, add_special_tokens=False)``: no BOS/EOS row in the average;
  ``leading_space=True`` encodes ``" " + word``, the form a word takes mid-sentence in
  byte-level BPE vocabularies (GPT-2, Llama 3), which is often one token where the
  bare word is several;
* a word of several tokens gets the **mean of its token rows** (float32) -- a common,
  crude choice: it is not what the model "means" by the word, and WEFE's metrics then
  measure those averages;
* layer 0 of HF's ``output_hidden_states`` is the embedding layer's output. For
  Llama-style models (rotary positions) that is exactly ``embed_tokens.weight[token]``;
  for models that scale embeddings (Gemma: times sqrt(hidden)) it is the scaled row,
  which changes no cosine; for models with absolute position embeddings (GPT-2) it is
  ``wte[token] + wpe[0]`` -- one constant offset for every token, which does change
  cosines. One token per request keeps that offset the same for every token, instead
  of depending on the token's place in the word.

A word that tokenizes to nothing (an empty string after preprocessing) is not found,
and counts against the lost-vocabulary threshold like any missing word.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ...engine import HiddenStates, Node, Params, metric
from .lookup import LookupOptions, QueryLookup, SetLookup, lookup_query
from .query import Query
from .vectors import WordVectors

__all__ = [
    "VERSION", "HFSource", "Source", "WordSetParams", "lookup_from_value", "lookup_node", "lookup_report",
    "lookup_set", "lookup_value", "set_node", "set_value", "token_ids",
]

VERSION = "1"  # every fairness node's version


# -- stored values ------------------------------------------------------------------------------
def set_value(s: SetLookup, variants: Any = None) -> dict[str, Any]:
    """A SetLookup as storable data (lists, one float32 matrix, no objects)."""
    return {
        "words": list(s.words),
        "variants": None if variants is None else [list(v) for v in variants],
        "found": list(s.found),
        "vectors": np.ascontiguousarray(s.vectors, dtype=np.float32),
        "positions": np.asarray(s.positions, dtype=np.int64),
        "not_found": list(s.not_found),
        "missing": list(s.missing),
    }


def set_from_value(v: dict[str, Any], name: str, kind: str) -> SetLookup:
    vectors = np.asarray(v["vectors"], dtype=np.float32)
    vectors.flags.writeable = False
    return SetLookup(
        name, kind, tuple(v["words"]), tuple(v["found"]), vectors,
        tuple(int(p) for p in v["positions"]), tuple(v["not_found"]), tuple(v["missing"]),
    )


def lookup_value(lk: QueryLookup, settings: dict[str, Any]) -> dict[str, Any]:
    def one(s: SetLookup) -> dict[str, Any]:
        return {"name": s.name, **set_value(s), "lost_fraction": s.lost_fraction}

    return {
        "query_name": lk.query_name,
        "reason": lk.reason,
        "lost_vocabulary_threshold": lk.lost_vocabulary_threshold,
        "settings": dict(settings),
        "targets": [one(s) for s in lk.targets],
        "attributes": [one(s) for s in lk.attributes],
    }


def lookup_from_value(v: dict[str, Any]) -> QueryLookup:
    """The stored lookup back as the ``QueryLookup`` every metric function takes."""
    targets = tuple(set_from_value(s, s["name"], "target") for s in v["targets"])
    attributes = tuple(set_from_value(s, s["name"], "attribute") for s in v["attributes"])
    query = Query(
        [s.words for s in targets], [s.words for s in attributes],
        [s.name for s in targets], [s.name for s in attributes],
    )
    return QueryLookup(
        query, targets, attributes, float(v["lost_vocabulary_threshold"]),
        dict(v.get("settings") or {}), v["reason"],
    )


def lookup_report(v: dict[str, Any]) -> dict[str, Any]:
    """The lookup without vectors: what WEAT_LOOKUP.json shows per query."""
    def strip(s: dict[str, Any]) -> dict[str, Any]:
        return {k: s[k] for k in ("name", "found", "missing", "not_found", "lost_fraction")}

    return {
        "query_name": v["query_name"],
        "reason": v["reason"],
        "lost_vocabulary_threshold": v["lost_vocabulary_threshold"],
        "settings": v["settings"],
        "targets": [strip(s) for s in v["targets"]],
        "attributes": [strip(s) for s in v["attributes"]],
    }


# -- one word set ------------------------------------------------------------------------------
class WordSetParams(Params):
    """One word set and what the lookup settings make of it.

    ``variants[i][j]`` is the key preprocessor i makes of word j (None: the words
    themselves, i.e. WEFE's default ``[{}]``). Names and roles are not here: a set
    node serves every query, as target or attribute, that uses these words.
    """

    words: tuple[str, ...] = Field(min_length=1)
    variants: tuple[tuple[str, ...], ...] | None = None
    strategy: Literal["first", "all"] = "first"
    normalize: bool = False


def _preprocessors(words: tuple[str, ...], variants: Any) -> list[dict[str, Any]]:
    """The variants as WEFE preprocessor dicts: one lookup table per preprocessor."""
    if variants is None:
        return [{}]
    return [{"preprocessor": dict(zip(words, v, strict=True)).__getitem__} for v in variants]


def lookup_set(vectors: WordVectors, params: WordSetParams) -> SetLookup:
    """WEFE's lookup of one set (``lookup_query`` on a one-set query)."""
    lk = lookup_query(
        vectors,
        Query([params.words]),
        lost_vocabulary_threshold=1.0,  # the rule is the query's business (wefe_lookup)
        preprocessors=_preprocessors(params.words, params.variants),
        strategy=params.strategy,
        normalize=params.normalize,
    )
    return lk.targets[0]


@metric("wefe_word_set", version=VERSION, params=WordSetParams, needs=("embeddings",))
def word_set(embeddings: WordVectors, params: WordSetParams) -> dict[str, Any]:
    """Found and missing words of one set, and the vectors found (normalised if asked)."""
    return set_value(lookup_set(embeddings, params), params.variants)


# -- one word set, from a model's input embeddings ----------------------------------------------
class HFSource(Params):
    """Take vectors from the input embeddings of the model bound as ``resource``."""

    resource: str = "model"
    leading_space: bool = False


class HFWordSetParams(WordSetParams):
    leading_space: bool = False


def token_ids(tokenizer: Any, text: str, leading_space: bool = False) -> tuple[int, ...]:
    """The word's token ids, without special tokens."""
    if not text:
        return ()
    return tuple(tokenizer((" " + text) if leading_space else text, add_special_tokens=False)["input_ids"])


@metric("wefe_word_set_hf", version=VERSION, params=HFWordSetParams, needs=("model",))
def word_set_hf(model: Any, params: HFWordSetParams):
    """One word set looked up in a model's input embeddings (multi-token words averaged).

    The value is the file-embeddings set node's, plus ``tokens``: the token pieces
    each found key was averaged over, so the report shows what was averaged.
    """
    tokenizer = model.encoder().tokenizer
    keys = list(dict.fromkeys(k for v in (params.variants or (params.words,)) for k in v))
    ids = {k: token_ids(tokenizer, k, params.leading_space) for k in keys}
    distinct = sorted({t for seq in ids.values() for t in seq})
    results = yield [HiddenStates(ids=(t,), layers=(0,)) for t in distinct]
    row = {t: np.asarray(r.states[0, 0], dtype=np.float32) for t, r in zip(distinct, results, strict=True)}
    known = [k for k in keys if ids[k]]
    dim = len(next(iter(row.values()))) if row else 1
    matrix = np.stack([np.mean([row[t] for t in ids[k]], axis=0) for k in known]) if known else np.zeros((0, dim), np.float32)
    vocab = WordVectors(known, matrix.astype(np.float32), source=f"input embeddings of {getattr(model, 'name', 'model')}")
    out = set_value(lookup_set(vocab, params), params.variants)
    out["tokens"] = {k: tokenizer.convert_ids_to_tokens(list(ids[k])) for k in out["found"]}
    return out


# -- one query ---------------------------------------------------------------------------------
class LookupParams(Params):
    """A query's set names (in order) and the rule that makes it NaN."""

    target_names: tuple[str, ...] = Field(min_length=1)
    attribute_names: tuple[str, ...] = ()
    lost_vocabulary_threshold: float = Field(0.2, ge=0.0, le=1.0)
    strategy: Literal["first", "all"] = "first"
    settings: dict[str, Any] = {}  # how the words were preprocessed, for the report


def _found_vocabulary(sets: list[dict[str, Any]]) -> WordVectors:
    rows: dict[str, np.ndarray] = {}
    for s in sets:
        rows.update(zip(s["found"], np.asarray(s["vectors"], np.float32), strict=True))
    dim = int(np.asarray(sets[0]["vectors"]).shape[1])
    matrix = np.stack(list(rows.values())) if rows else np.zeros((0, dim), np.float32)
    return WordVectors(list(rows), matrix, source="<found words>")


@metric("wefe_lookup", version=VERSION, params=LookupParams)
def query_lookup(params: LookupParams, **sets: dict[str, Any]) -> dict[str, Any]:
    """Found / missing words per named set, and why the query is NaN if it is.

    Parents are the set nodes ``t0, t1, …`` and ``a0, a1, …``. The lost-vocabulary
    rule is ``lookup_query`` itself, run on a vocabulary made of exactly
    the words the set nodes found: lookups only ever ask about the query's own keys,
    so that vocabulary answers every one of them as the full embeddings would, and
    the reason text is the one it writes. (Vectors arrive already normalised, hence
    ``normalize=False`` here.)
    """
    targets = [sets[f"t{i}"] for i in range(len(params.target_names))]
    attributes = [sets[f"a{i}"] for i in range(len(params.attribute_names))]
    every = targets + attributes
    query = Query(
        [s["words"] for s in targets], [s["words"] for s in attributes],
        params.target_names, params.attribute_names,
    )
    n_pre = len(every[0]["variants"] or [None])
    preprocessors = []
    for i in range(n_pre):  # one table over the whole query: a word maps alike in every set
        table: dict[str, str] = {}
        for s in every:
            keys = s["variants"][i] if s["variants"] is not None else s["words"]
            table.update(zip(s["words"], keys, strict=True))
        preprocessors.append({"preprocessor": table.__getitem__})
    lk = lookup_query(
        _found_vocabulary(every), query,
        lost_vocabulary_threshold=params.lost_vocabulary_threshold,
        preprocessors=preprocessors, strategy=params.strategy, normalize=False,
    )
    return lookup_value(lk, params.settings)


# -- building them -------------------------------------------------------------------------------
#: where vectors come from: the name of a word-embeddings resource, or a model's input embeddings
Source = str | HFSource


def set_node(words: Sequence[str], lookup: LookupOptions, source: Source = "embeddings") -> Node:
    """The lookup of one word set; shared by every query that uses these words alike."""
    words = tuple(words)
    common = {"words": words, "variants": lookup.variants(words),
              "strategy": lookup.strategy, "normalize": lookup.normalize}
    if isinstance(source, HFSource):
        return word_set_hf(leading_space=source.leading_space, bind={"model": source.resource}, **common)
    return word_set(bind={"embeddings": source} if source != "embeddings" else None, **common)


def lookup_node(query: Query, lookup: LookupOptions, source: Source = "embeddings") -> Node:
    """The query's named sets under the lost-vocabulary rule (the NaN reason lives here)."""
    parents = {f"t{i}": set_node(w, lookup, source) for i, w in enumerate(query.target_sets)}
    parents.update({f"a{i}": set_node(w, lookup, source) for i, w in enumerate(query.attribute_sets)})
    return query_lookup(
        parents=parents,
        target_names=query.target_sets_names,
        attribute_names=query.attribute_sets_names,
        lost_vocabulary_threshold=lookup.lost_vocabulary_threshold,
        strategy=lookup.strategy,
        settings=lookup.describe(),
    )
