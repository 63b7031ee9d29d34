"""The HF handler of ``token_logits`` (``logits_request.py``), registered on import.

One padded forward pass per batch (right padding, so each row's positions are its own);
each row's real positions are cut out, cast to float32 and moved to the CPU. The batch
budget is the executor's, per token, like every kind; the ``[batch, len, vocab]`` tensor
is what this kind is for, so there is no head-splitting trick here.
"""

from __future__ import annotations

from ...engine.adapters.hf.hf_adapter import HFAdapter
from .logits_request import TokenLogits, TokenLogitsResult


def serve(adapter: HFAdapter, reqs: list[TokenLogits]) -> list[TokenLogitsResult]:
    import torch

    ids, mask, pos, starts = adapter.pad([r.ids for r in reqs], TokenLogits.padding_side, reference=False)
    with torch.inference_mode():
        logits = adapter.model(**adapter._inputs(ids, mask, pos)).logits
        return [TokenLogitsResult(logits[i, a: a + len(r.ids)].float().cpu().numpy())
                for i, (r, a) in enumerate(zip(reqs, starts))]


HFAdapter.handlers.add("token_logits", serve)
