"""The shared nodes of ROME's conditioning diagnostics: the key covariance, the context
templates and each edit's keys (EasyEdit's ``rome/compute_u.py`` and ``layer_stats``).

* :func:`rome_key_covariance` -- C = E[k k^T] over every token of every corpus text, of
  layer L's down-projection inputs, in float64, and the exact inverse of C + ridge * I.
  One node per (model, layer, corpus, ridge): both diagnostics of a layer read it, so a
  second one costs no corpus pass. Without a ridge a singular C is refused, naming its rank.
* :func:`rome_context_templates` -- ROME's prefixes: ``"{}"`` plus ``"<sample>. {}"`` for
  samples drawn from the model after its bos with top-k 5, ``(length, count)`` =
  (5, 10), (10, 10) (``max_out_len`` counts the bos, so length - 1 new tokens). Seeded
  generation requests through the executor: cached like any other.
* :func:`rome_keys` -- per edit, k (the input at the subject's last token of the bare
  prompt) and k-bar (that input averaged over the templates; the bare prompt alone with
  no templates).

torch is not needed here: the executor's handler (``keys_backend.py``) runs the model.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ...engine import Generate, GenerationSettings, InputError, Params, metric
from .keys_backend import DownProjKeys
from .prompts import encode, subject_range

ROME_LENGTHS = ((5, 10), (10, 10))  # rome_main.py: get_context_templates(model, tok, [[5, 10], [10, 10]])
TOP_K = 5


class CovParams(Params):
    layer: int
    ridge: float = 0.0


@metric("rome_key_covariance", version="1", params=CovParams, needs=("model", "corpus"),
        requests={"model": {"down_proj_keys": ()}})
def rome_key_covariance(model: Any, corpus: list[dict], params: CovParams):
    """E[k k^T] of the down-projection's inputs over every corpus token, and the inverse ROME uses."""
    enc = model.encoder()
    got = yield [DownProjKeys(encode(enc, row["text"]), params.layer) for row in corpus]
    keys = np.concatenate([g.keys for g in got]).astype(np.float64)
    cov = keys.T @ keys / keys.shape[0]
    d = cov.shape[0]
    rank = int(np.linalg.matrix_rank(cov))
    if params.ridge == 0 and rank < d:
        raise InputError(f"the key covariance of layer {params.layer} over the corpus ({keys.shape[0]} tokens) has rank "
                         f"{rank} of {d}: it cannot be inverted exactly; give --cov-ridge R (make_edit --method rome "
                         "uses 0.01) or a larger --corpus")
    inverse = np.linalg.inv(cov + params.ridge * np.eye(d))
    return {"inverse": inverse, "tokens": int(keys.shape[0]), "rank": rank}


class TemplateParams(Params):
    lengths: tuple[tuple[int, int], ...] = ROME_LENGTHS
    top_k: int = TOP_K
    seed: int = 0


@metric("rome_context_templates", version="1", params=TemplateParams, needs=("model",), requests={"model": {"generate": ()}})
def rome_context_templates(model: Any, params: TemplateParams):
    """ROME's context prefixes (the bare prompt's ``""`` first), sampled from the model after its bos."""
    enc = model.encoder()
    tok = enc.tokenizer
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    reqs = []
    for length, count in params.lengths:
        for _ in range(count):
            settings = GenerationSettings(max_new_tokens=max(1, length - 1), do_sample=True, top_k=params.top_k,
                                          seed=params.seed + len(reqs))
            reqs.append(Generate((int(start),), settings))
    got = yield reqs
    return {"prefixes": [""] + [g.text.replace("{", " ").replace("}", " ") + ". " for g in got]}


class KeyParams(Params):
    layer: int
    templates: Literal["rome", "none"] = "rome"


def _template_parents(p: KeyParams) -> dict:
    return {"templates": "rome_context_templates"} if p.templates == "rome" else {}


@metric("rome_keys", version="1", params=KeyParams, parents=_template_parents, needs=("model", "edits"),
        requests={"model": {"down_proj_keys": ()}})
def rome_keys(model: Any, edits: list[dict], params: KeyParams, templates: dict | None = None):
    """Per edit: k at the subject's last token of the bare prompt, and k-bar over the templates."""
    enc = model.encoder()
    prefixes = templates["prefixes"] if templates is not None else [""]
    reqs, layout = [], []
    for i, row in enumerate(edits):
        for prefix in prefixes:
            text = prefix + row["prompt"]
            ids = encode(enc, text)
            # the prompt's own mention of the subject: after the prefix, so the last one before it ends
            last = subject_range(enc, ids, row["subject"], text, "last" if prefix else "first")[1] - 1
            reqs.append(DownProjKeys(ids, params.layer, (last,)))
        layout.append(len(prefixes))
    got = yield reqs
    k, kbar, at = [], [], 0
    for n in layout:
        rows = np.stack([g.keys[0].astype(np.float64) for g in got[at : at + n]])
        k.append(rows[0])  # the bare prompt comes first
        kbar.append(rows.mean(axis=0))
        at += n
    return {"k": np.asarray(k), "kbar": np.asarray(kbar), "prefixes": list(prefixes)}
