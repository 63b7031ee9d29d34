"""``forget_Q_A_gibberish`` (TOFU) / ``forget_gibberish`` (MUSE): a classifier over the generations.

Mirrors open-unlearning's ``classification_prob`` handler (``src/evals/metrics/utility.py``;
``configs/eval/tofu_metrics/forget_Q_A_gibberish.yaml``, ``muse_metrics/forget_gibberish.yaml``):
the texts are ``value_by_index[i][text_key]`` of its ``pre_compute`` ROUGE result (the
greedy generation after the eos and stop-string cuts, stripped), each is scored with the
softmax probability of class ``class_id``, and ``agg_value`` is the mean over items.
Output items are ``{"score": p, "<text_key>": text}``, as there.

The parent is the ROUGE node itself, so the generations are the cached ones ROUGE read:
adding this metric to a finished run costs only the classifier's forwards, which go
through the executor as ``classify_text`` requests (``classify_request.py``) to the
``classifier_model`` resource (``classifier_backend.py``), batched and cached per
classifier fingerprint.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...engine import Params, Result, metric
from .classify_request import ClassifyText


class ClassifierParams(Params):
    """open-unlearning's settings: which class, the tokenizer's cut, which text of the item."""

    class_id: int = 0
    max_length: int = 512  # TOFU's config: 32; MUSE's: 512 (the specs pass theirs)
    text_key: str = "generation"


@metric("classifier_prob", version="1", params=ClassifierParams, parents={"text": "rouge"}, needs=("classifier_model",),
        requests={"classifier_model": {"classify_text": ()}})
def classifier_prob(text: Result, classifier_model: Any, params: ClassifierParams):
    """Per item, P(class ``class_id``) of the classifier on the item's generation; their mean."""
    items = text.value_by_index or {}
    keys = list(items)
    texts = []
    for k in keys:
        value = items[k].get(params.text_key) if isinstance(items[k], dict) else None
        if not isinstance(value, str):
            raise ValueError(f"classifier_prob: item {k} of the parent has no text {params.text_key!r}")
        texts.append(value)
    got = yield [("classifier_model", ClassifyText(t, params.max_length)) for t in texts]
    vbi: dict[str, Any] = {}
    for k, t, g in zip(keys, texts, got):
        if not 0 <= params.class_id < len(g.probs):
            raise ValueError(f"classifier_prob: class_id {params.class_id} is outside the classifier's "
                             f"{len(g.probs)} labels (0..{len(g.probs) - 1})")
        vbi[k] = {"score": float(g.probs[params.class_id]), params.text_key: t}
    if not vbi:
        return Result.nan("no generations to classify")
    return Result(agg_value=float(np.mean([v["score"] for v in vbi.values()])), value_by_index=vbi)
