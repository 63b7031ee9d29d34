"""What an hf model will put through its forward passes, counted before its weights load.

``--plan-only`` (engine/costs.py) counts tokens per kind from the data and the tokenizer. With
shared question prefixes on, the run forwards a question's context once for all its answers
(hf_prefix.py), so counting each (context, answer) pair whole overstated token statistics by
half on a chat-templated real model. This repeats the run's own decisions without the weights:
whether the model's cache allows sharing (its config), the executor's packing
(``batching.pack_by_prefix`` under the device's default budget), and what a batch with repeated
contexts or a shared head forwards (``hf_prefix.shares``, ``hf_prefix.forwarded_tokens``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Sequence

from ...batching import default_budget, pack_by_prefix
from ...requests import Request, kind_of
from . import hf_prefix


def planned_tokens(resource: Any, kind: str, reqs: Sequence[Request], share_prefixes: bool,
                   batch_tokens: int | None = None) -> int:
    """The real tokens ``resource`` (an HFModel) will forward for ``reqs``, one kind's distinct
    requests, when the run's setting is ``share_prefixes``. Exact where the run's budget is the
    default one (cpu, mps, ``--batch-tokens``); on cuda the run sizes it from free memory, which
    may cut a question's answers into two batches that the plan kept in one."""
    whole = sum(r.length() for r in reqs)
    if not (share_prefixes and kind == "token_stats" and resource.sharded is None and _cache_fits(resource)):
        return whole
    budget = default_budget(resource.device_type(), batch_tokens, None, kind_of(kind).max_batch)
    batches = pack_by_prefix(list(reqs), lambda r: r.length(), lambda r: r.prefix(), budget)
    return sum(hf_prefix.forwarded_tokens(b) if hf_prefix.shares(b) else sum(r.length() for r in b)
               for b in batches)


def _cache_fits(resource: Any) -> bool:
    """hf_prefix.cache_fits from the config alone; a config that cannot be read counts whole."""
    objects = getattr(resource, "_objects", None)
    if objects is not None:
        return hf_prefix.cache_fits(objects[0])
    try:
        from transformers import AutoConfig

        own = getattr(resource, "_config", None)  # hf_gguf's: the GGUF file's header
        config = own() if own else AutoConfig.from_pretrained(resource.path)
    except Exception:  # noqa: BLE001 - no readable config: the pairs are counted whole
        return False
    return hf_prefix.cache_fits(SimpleNamespace(config=config))
