"""Word vectors from a language model's input embeddings, through the executor.

Reading an embedding row is model work, so it goes where all model work goes: the
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

from typing import Any

import numpy as np

from ...engine import HiddenStates, Params, metric
from .node_values import set_value
from .nodes import VERSION, WordSetParams, lookup_set
from .word_vectors import WordVectors

__all__ = ["HFSource", "HFWordSetParams", "token_ids", "word_set_hf"]


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
