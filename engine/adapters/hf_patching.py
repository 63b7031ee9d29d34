"""Patched forward passes for causal tracing (ROME's ``trace_with_patch``), batched.

A batch of :class:`~evaldag.engine.requests.CausalTrace` cells runs in two forward passes,
however many (layer, position) cells it holds:

1. a clean pass over each distinct prompt, recording the output of every module some
   cell restores (and the clean P(answer) at the last position);
2. one corrupted pass over ``samples`` rows per cell: forward hooks add each cell's
   seeded noise to the subject's token embeddings and write the clean state back at the
   cell's (module, position); P(answer) at the last position is averaged over the cell's
   rows.

Rows are right padded, so every real position sees exactly what it would see alone.
Module names come from :mod:`.layer_names`. torch is imported inside functions.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from ..requests import CausalTrace, CausalTraceResult
from .layer_names import layer_names, num_layers

# Heavy imports (torch) happen inside the functions that use them: a warm rerun never pays for them.


def _main(out: Any) -> Any:
    """The hidden-state tensor of a module's output (blocks and attention may return tuples)."""
    return out[0] if isinstance(out, tuple) else out


def _replace(out: Any, new: Any) -> Any:
    return (new, *out[1:]) if isinstance(out, tuple) else new


def _noise(req: CausalTrace, hidden: int) -> Any:
    """ROME's noise: ``RandomState(seed).randn(samples, end - start, hidden)`` (float64) times ``noise``."""
    import torch

    a, b = req.subject
    draw = np.random.RandomState(req.seed).randn(req.samples, b - a, hidden)
    return req.noise * torch.from_numpy(draw)


def _last_probs(adapter: Any, ids: Any, mask: Any, seqs: Sequence[tuple[int, ...]], handles: list) -> Any:
    """Softmax at each row's last real position of one forward pass; the hooks are removed after it.

    Where the model is ``head(base(x))`` (the adapter's probe), only the last rows go
    through the output head: the [rows, len, vocab] logits never exist.
    """
    import torch

    last = torch.tensor([len(s) - 1 for s in seqs], device=ids.device)
    rows = torch.arange(len(seqs), device=ids.device)
    split = adapter.head_split()
    try:
        with torch.inference_mode():
            if split:
                hidden = split[0](input_ids=ids, attention_mask=mask, use_cache=False)[0]
                logits = split[1](hidden[rows, last])
            else:
                logits = adapter.model(input_ids=ids, attention_mask=mask, use_cache=False).logits[rows, last]
    finally:
        for h in handles:
            h.remove()
    return torch.softmax(logits.float(), dim=-1)


def run_causal_traces(adapter: Any, reqs: Sequence[CausalTrace]) -> list[CausalTraceResult]:
    """Serve a batch of trace cells on ``adapter.model`` (an :class:`HFAdapter`'s model)."""
    import torch

    model = adapter.model
    adapter.head_split()  # its one-off probe forward must run before any hook is registered
    cfg = model.config.to_dict()
    names = layer_names(str(cfg.get("model_type")))
    n_layers = num_layers(cfg)
    modules = dict(model.named_modules())
    restores = [[(r.restore, layer) for layer in r.restored_layers(n_layers)] for r in reqs]
    wanted = sorted({m for rs in restores for m in rs})

    # 1. clean pass over the distinct prompts, recording what the cells restore
    prompts = list(dict.fromkeys(r.ids for r in reqs))
    row_of = {p: i for i, p in enumerate(prompts)}
    ids, mask, _, _ = adapter.pad(list(prompts), "right", reference=False)
    clean: dict[tuple[str, int], Any] = {}

    def recorder(key: tuple[str, int]) -> Any:
        def hook(_m: Any, _inp: Any, out: Any) -> None:
            clean[key] = _main(out).detach()
        return hook

    handles = [modules[names.module(kind, layer)].register_forward_hook(recorder((kind, layer))) for kind, layer in wanted]
    clean_probs = _last_probs(adapter, ids, mask, prompts, handles)
    real_tokens, padded_tokens = sum(map(len, prompts)), ids.numel()

    answers = [int(clean_probs[row_of[r.ids]].argmax()) if r.answer < 0 else r.answer for r in reqs]

    # 2. the corrupted pass: samples rows per cell
    rows = [(i, s) for i, r in enumerate(reqs) for s in range(r.samples)]
    seqs = [reqs[i].ids for i, _ in rows]
    ids2, mask2, _, _ = adapter.pad(seqs, "right", reference=False)
    dev = ids2.device
    embed = modules[names.embed]
    hidden = embed.weight.shape[1]
    noises: dict[tuple, Any] = {}
    for r in reqs:
        k = (r.subject, r.noise, r.samples, r.seed)
        if k not in noises:
            noises[k] = _noise(r, hidden)

    def add_noise(_m: Any, _inp: Any, out: Any) -> Any:
        h = _main(out).clone()
        for row, (i, s) in enumerate(rows):
            r = reqs[i]
            a, b = r.subject
            h[row, a:b] += noises[(r.subject, r.noise, r.samples, r.seed)][s].to(h.device, h.dtype)
        return _replace(out, h)

    # (module) -> rows, positions and the clean rows they copy from
    plan: dict[tuple[str, int], list[tuple[int, int, int]]] = defaultdict(list)
    for row, (i, _) in enumerate(rows):
        for key in restores[i]:
            plan[key].append((row, reqs[i].position, row_of[reqs[i].ids]))

    def restorer(key: tuple[str, int]) -> Any:
        dst = torch.tensor([x[0] for x in plan[key]], device=dev)
        pos = torch.tensor([x[1] for x in plan[key]], device=dev)
        src = torch.tensor([x[2] for x in plan[key]], device=dev)

        def hook(_m: Any, _inp: Any, out: Any) -> Any:
            h = _main(out).clone()
            h[dst, pos] = clean[key][src, pos].to(h.dtype)
            return _replace(out, h)
        return hook

    handles = [embed.register_forward_hook(add_noise)]
    handles += [modules[names.module(kind, layer)].register_forward_hook(restorer((kind, layer))) for kind, layer in plan]
    probs = _last_probs(adapter, ids2, mask2, seqs, handles)
    adapter.record_tokens(real_tokens + sum(map(len, seqs)), padded_tokens + ids2.numel())

    out, at = [], 0
    for i, r in enumerate(reqs):
        p = probs[at : at + r.samples, answers[i]].mean()
        at += r.samples
        out.append(CausalTraceResult(float(p), float(clean_probs[row_of[r.ids], answers[i]]), answers[i], n_layers))
    return out
