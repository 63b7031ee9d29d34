"""A model-calling open-unlearning handler as one opaque request, served on an ``hf:`` model only.

Why a request kind (``ou_handler_call``) and not a metric that loads the model itself:
the executor then reads the request store before loading any model, so a cached call
never loads the weights; the planner refuses, before anything runs, a backend that
cannot serve the kind (an ``openai:`` server has no model object to hand a handler);
and the call is keyed by the handler's code, its arguments, its rows and the model's
fingerprint like every other model answer. It is *opaque*: the handler does its own
batching (``batch_size``) inside one request, so it is never packed with other work.

What the handler receives, as open-unlearning gives it: ``model`` (the loaded
transformers model), ``tokenizer``, ``data`` (the split's rows, each with its row
position as ``index``; open-unlearning's own dataset classes are not rebuilt),
``collators`` (:class:`PaddingCollator`, open-unlearning's ``DataCollatorForSupervisedDataset``
behaviour), ``batch_size``, ``generation_args``, ``pre_compute``, ``reference_logs`` and
the config's other arguments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from ...engine.adapters.hf.hf_adapter import HFAdapter
from ...engine.requests import ArrayResult, Request, register_kind
from .open_unlearning_compat_core import find_handler, plain


@dataclass(frozen=True)
class HandlerCall(Request):
    """One handler call: everything it reads, as canonical JSON, so equal calls are one cached answer."""

    handler: str
    handler_code: str
    payload: str  # {"kwargs": {...}, "data": [rows] | absent}
    kind: ClassVar[str] = "ou_handler_call"
    words: ClassVar[str] = ("a loaded Hugging Face model to hand to an open-unlearning handler that calls `model` "
                            "(such a handler runs only on an hf: model)")
    max_batch: ClassVar[int | None] = 1  # opaque: the handler batches its own rows

    def length(self) -> int:
        return 1


@dataclass
class HandlerCallResult(ArrayResult):
    """The handler's returned dict, as JSON bytes (values stay exactly what the handler returned)."""

    text: str

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"json": np.frombuffer(self.text.encode("utf-8"), dtype=np.uint8)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict) -> "HandlerCallResult":
        return cls(np.asarray(arrays["json"], dtype=np.uint8).tobytes().decode("utf-8"))


register_kind(HandlerCall, HandlerCallResult)


class PaddingCollator:
    """open-unlearning's ``DataCollatorForSupervisedDataset``, as its handlers call it.

    A list of items with ``input_ids`` (and ``labels``) -> a dict of tensors: ``input_ids``
    padded with the pad id, ``labels`` with -100, ``attention_mask`` = ``input_ids != pad``
    (open-unlearning's rule: a real token equal to pad is masked too) and ``index`` when
    the items carry one. Items that are dicts of such items (several answers per question)
    are collated per key, as there.
    """

    def __init__(self, tokenizer: Any, padding_side: str = "right", index: str | None = "index"):
        if padding_side not in ("left", "right"):
            raise ValueError(f"collator padding_side must be 'left' or 'right', not {padding_side!r}")
        self.tokenizer, self.padding_side, self.index = tokenizer, padding_side, index
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else tokenizer.eos_token_id

    def _pad(self, seqs: Sequence[Any], value: int) -> Any:
        import torch

        rows = [torch.as_tensor(s, dtype=torch.long) for s in seqs]
        width = max((len(r) for r in rows), default=0)
        out = torch.full((len(rows), width), value, dtype=torch.long)
        for i, r in enumerate(rows):
            if self.padding_side == "right":
                out[i, : len(r)] = r
            elif len(r):
                out[i, -len(r):] = r
        return out

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        import torch

        if items and "input_ids" not in items[0]:  # several options per item: one batch per option key
            return {k: self([item[k] for item in items]) for k in items[0]}
        batch = {"input_ids": self._pad([it["input_ids"] for it in items], self.pad_id)}
        batch["attention_mask"] = batch["input_ids"].ne(self.pad_id).long()
        if items and "labels" in items[0]:
            batch["labels"] = self._pad([it["labels"] for it in items], -100)
        if self.index and items and self.index in items[0]:
            batch["index"] = torch.tensor([int(it[self.index]) for it in items])
        return batch


def serve(adapter: HFAdapter, reqs: list[HandlerCall]) -> list[HandlerCallResult]:
    """Call each handler with the loaded model, open-unlearning's way (the handler sets no_grad itself)."""
    out = []
    for r in reqs:
        h = find_handler(r.handler)
        if h is None or h.code != r.handler_code:
            raise ValueError(f"open-unlearning handler {r.handler!r} is not loaded, or its code changed since "
                             "the request was made")
        body = json.loads(r.payload)
        kw = body["kwargs"]
        coll = kw.pop("collator_args", {}) or {}
        if "data" in body:
            kw["data"] = body["data"]
        kw.update(tokenizer=adapter.tokenizer, collators=PaddingCollator(adapter.tokenizer, **coll))
        result = h.fn(adapter.model, handler=r.handler, **kw)
        if not isinstance(result, Mapping):
            raise ValueError(f"handler {r.handler!r} returned a {type(result).__name__}, not a dict")
        out.append(HandlerCallResult(json.dumps(plain(dict(result)), default=str)))
    adapter.record_tokens(0, 0)
    return out


HFAdapter.handlers.add("ou_handler_call", serve)
