"""GradNorm for :class:`~evaldag.engine.adapters.hf_adapter.HFAdapter`: per-sample
gradient norms, one backward pass per row or many rows in one pass.

Both give open-unlearning's number for a request: loss = -mean(log p of the
continuation, minus its last token if exclude_last), in train mode; value = mean over
the parameters that receive a gradient of ``||grad||_p``.

* :func:`one_row`: open-unlearning's batch of one, under a forked RNG seeded with 0.
* :func:`many_rows`: ``torch.func.vmap(grad(loss))`` over rows of one length (no
  padding, no mask: each row runs the causal attention path of its one-row forward);
  each sample's loss weights only its own scored tokens. Rows holding the pad id (which
  the reference mask hides inside a sequence) are left to one_row. Only for models with
  no active dropout (then train mode draws no random numbers); per-sample gradients of
  every parameter exist at once, so the caller bounds the rows.

torch is imported inside the functions.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..requests import GradNorm

# Heavy imports (torch) happen inside the functions that use them: a warm rerun never pays for them.


def scored(r: GradNorm) -> int:
    """Continuation tokens in the loss; 0 gives NaN."""
    if not r.context_ids:
        raise ValueError("GradNorm needs at least one context token")
    return len(r.continuation_ids) - (1 if r.exclude_last else 0)


def one_row(model: Any, r: GradNorm, masked_id: int | None) -> tuple[float, list[str]]:
    """(value, names of the parameters that received a gradient)."""
    import torch

    c, n = len(r.context_ids), scored(r)
    ids = torch.tensor([r.context_ids + r.continuation_ids], device=model.device)
    cuda = [model.device] if model.device.type == "cuda" else []
    with torch.enable_grad(), torch.random.fork_rng(devices=cuda):
        torch.manual_seed(0)
        mask = torch.ones_like(ids) if masked_id is None else (ids != masked_id).long()
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[0]
        logp = torch.log_softmax(logits[c - 1 : c - 1 + n].float(), dim=-1)
        loss = -logp.gather(1, ids[0, c : c + n, None]).mean()
        model.zero_grad(set_to_none=True)
        loss.backward()
    named = [(k, p.grad) for k, p in model.named_parameters() if p.grad is not None]
    norms = [g.detach().float().norm(p=r.p) for _, g in named]
    return float(torch.stack(norms).mean()), [k for k, _ in named]


def dropout_free(model: Any) -> bool:
    """No module of ``model`` draws random numbers in train mode (every dropout p == 0)."""
    import torch

    cfg = model.config
    rates = [getattr(cfg, k, 0.0) or 0.0 for k in ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop",
                                                     "attn_pdrop", "dropout", "hidden_dropout_prob")]
    mods = [m.p for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)]
    return not any(float(x) > 0 for x in rates + mods)


def many_rows(model: Any, reqs: list[GradNorm], masked_id: int | None, used: list[str]) -> list[float]:
    """One vmapped backward for ``reqs``: rows of one length, each with scored tokens,
    the same p and no masked (pad) id, so no row needs a mask or padding and each is
    computed as its one-row forward is (the same causal attention path).

    ``used`` names the parameters whose norms count (those a one-row backward reaches).
    """
    import torch
    from torch.func import functional_call, grad, vmap

    seqs = [r.context_ids + r.continuation_ids for r in reqs]
    if len({len(x) for x in seqs}) != 1 or len({r.p for r in reqs}) != 1:
        raise ValueError("many_rows: rows of one length and one p only")
    if masked_id is not None and any(masked_id in x for x in seqs):
        raise ValueError("many_rows: a row holds the masked (pad) id; use one_row")
    dev = model.device
    ids = torch.tensor(seqs, dtype=torch.long, device=dev)
    weight = torch.zeros((len(reqs), ids.shape[1] - 1), dtype=torch.float32, device=dev)
    for i, r in enumerate(reqs):
        c, n = len(r.context_ids), scored(r)
        weight[i, c - 1 : c - 1 + n] = 1.0 / n  # logits at t predict t + 1
    params = {k: p.detach() for k, p in model.named_parameters() if k in set(used)}
    frozen = {k: p.detach() for k, p in model.named_parameters() if k not in params}
    buffers = dict(model.named_buffers())

    def loss(ps: dict, x: Any, w: Any) -> Any:
        out = functional_call(model, ({**ps, **frozen}, buffers), args=(), kwargs={"input_ids": x[None], "use_cache": False})
        logp = torch.log_softmax(out.logits[0, :-1].float(), dim=-1)
        return -(logp.gather(1, x[1:, None])[:, 0] * w).sum()

    with torch.enable_grad(), warnings.catch_warnings():
        # attention has no vmap batching rule: torch loops over the rows there, and says so each call
        warnings.filterwarnings("ignore", message="There is a performance drop", category=UserWarning)
        grads = vmap(grad(loss), in_dims=(None, 0, 0), randomness="error")(params, ids, weight)
    p = reqs[0].p
    norms = torch.stack([torch.linalg.vector_norm(grads[k].float().flatten(1), ord=p, dim=1) for k in used])
    return norms.mean(0).tolist()
