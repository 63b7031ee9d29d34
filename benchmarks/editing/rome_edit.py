"""ROME's rank-one edit of one MLP down-projection (Meng et al. 2022, §3), for tiny models.

The down-projection W is read as a key-value memory: its input at the subject's last
token is the key k, its output the value. ROME picks

* the key k* = that input after the edit's rewrite prompt (ROME averages it over the
  prompt behind a few generated prefixes; a tiny model trained on names at the start of
  a sentence has no use for prefixes, and the paraphrases stay unseen, for
  generalisation to measure);
* the value v* = W k* + delta, with delta found by gradient descent so that, written at the
  subject's last token, it makes ``target_new`` likely after every prompt (NLL plus ROME's
  weight decay on |delta| / |W k*|^2, delta clamped to ``clamp`` x |W k*|);
* the update W' = W + (v* - W k*) (C^-1 k*)^T / ((C^-1 k*)^T k*), which maps k* to v* and
  changes W's output least on keys distributed as the covariance C = E[k k^T].

C comes from ``corpus`` (ROME: 100,000 Wikipedia samples; here whatever texts the caller
passes, every token of each; keep them apart from the texts the metrics score), with a
small ridge for keys the corpus never spans. ROME's KL term on "{subject} is a" is left
out: it protects the subject's other attributes, which the shipped edits do not measure.
Edits are applied one after another (rank one each).
torch is imported inside functions.
"""

from __future__ import annotations

from typing import Any

from ...engine.adapters.hf.hf_encoder import HFEncoder
from ...metrics.editing.prompts import encode, subject_range, target_ids

STEPS, LR, WEIGHT_DECAY, CLAMP, RIDGE = 60, 0.5, 0.5, 4.0, 1e-2


def _down_proj_input(model: Any, down: Any, batches: list[list[int]]) -> Any:
    """Every token's input to ``down`` over ``batches`` of ids: (tokens, keys)."""
    import torch

    rows = []
    hook = down.register_forward_hook(lambda _m, inp, _out: rows.append(inp[0][0].detach()))
    try:
        with torch.no_grad():
            for ids in batches:
                model(torch.tensor([ids]))
    finally:
        hook.remove()
    return torch.cat(rows).double()


def key_covariance(model: Any, down: Any, encoder: HFEncoder, corpus: list[str]) -> Any:
    """ROME's second moment E[k k^T] of the down-projection's inputs over ``corpus``."""
    keys = _down_proj_input(model, down, [list(encode(encoder, t)) for t in corpus])
    return keys.T @ keys / keys.shape[0]


def target_nll(model: Any, encoder: HFEncoder, prompt: str, target: str) -> Any:
    """Mean NLL of ``target``'s tokens after ``prompt`` (each tokenized alone, as ROME does)."""
    import torch

    ctx, tgt = encode(encoder, prompt), target_ids(encoder, target)
    logp = torch.log_softmax(model(torch.tensor([ctx + tgt])).logits[0].float(), -1)
    rows = torch.arange(len(ctx) - 1, len(ctx) - 1 + len(tgt))
    return -logp[rows, torch.tensor(tgt)].mean()


def _key(model: Any, down: Any, encoder: HFEncoder, prompt: str, subject: str) -> tuple[list[int], int, Any]:
    ids = list(encode(encoder, prompt))
    last = subject_range(encoder, ids, subject, prompt)[1] - 1
    return ids, last, _down_proj_input(model, down, [ids])[last]


def rome_update(model: Any, down: Any, encoder: HFEncoder, edit: dict, cov: Any,
                steps: int = STEPS, lr: float = LR) -> Any:
    """Apply one edit to ``down`` (an ``nn.Linear``) in place; returns the value shift delta = v* - W k*."""
    import torch

    _, last, k = _key(model, down, encoder, edit["prompt"], edit["subject"])
    weight = down.weight
    v0 = (weight.detach().double() @ k).to(weight.dtype)
    if float(v0.norm()) == 0.0:
        raise ValueError(f"edit {edit['subject']!r}: this down-projection outputs zero at the subject's last token "
                         "(a layer without a working MLP?); ROME scales its value by that output: pick another layer")
    delta = torch.zeros_like(v0, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=lr)

    def add_delta(_m, _inp, out):  # the candidate value, written at the subject's last token
        out = out.clone()
        out[0, last] += delta
        return out

    hook = down.register_forward_hook(add_delta)
    grads = {id(p): p.requires_grad for p in model.parameters()}
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        for _ in range(steps):
            opt.zero_grad()
            nll = target_nll(model, encoder, edit["prompt"], edit["target_new"])
            loss = nll + WEIGHT_DECAY * delta.norm() / v0.norm() ** 2  # ROME's: |delta|, not squared
            loss.backward()
            opt.step()
            with torch.no_grad():  # ROME's clamp on |delta|
                limit = CLAMP * v0.norm()
                if delta.norm() > limit:
                    delta.mul_(limit / delta.norm())
    finally:
        hook.remove()
        for p in model.parameters():
            p.requires_grad_(grads[id(p)])
    ck = torch.linalg.solve(cov + RIDGE * torch.eye(cov.shape[0], dtype=cov.dtype), k)
    change = torch.outer(delta.detach().double(), ck) / (ck @ k)
    with torch.no_grad():
        weight += change.to(weight.dtype)
    return delta.detach()
