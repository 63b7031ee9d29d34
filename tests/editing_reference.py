"""ROME's causal trace written out (``calculate_hidden_flow`` / ``trace_with_patch``): the reference
the batched trace is tested against (tests/metrics/test_editing_trace.py) and timed against
(tests/perf/bench_editing.py). One forward pass of ``samples + 1`` rows per (position, layer)
cell, row 0 clean, as ROME runs it. Module names are given per architecture (default: Llama's),
written out here rather than taken from evaldag's table, so a wrong table entry fails."""

import numpy as np
import torch

LLAMA = {"embed": "model.embed_tokens", "hidden": "model.layers.{}", "mlp": "model.layers.{}.mlp", "attn": "model.layers.{}.self_attn"}


def rome_trace(model, ids, subject, noise, samples, seed, kind, window, answer=None, names=LLAMA):
    """ROME's calculate_hidden_flow / trace_with_patch, one forward of samples+1 rows per cell."""
    n_layers = model.config.num_hidden_layers if hasattr(model.config, "num_hidden_layers") else model.config.n_layer
    modules = dict(model.named_modules())
    inp = torch.tensor([ids] * (samples + 1))
    a, b = subject
    with torch.no_grad():
        clean = torch.softmax(model(inp[:1]).logits[0, -1], -1)
    answer = int(clean.argmax()) if answer is None else answer

    def patched(states):  # states: list of (module name, position)
        def noise_hook(_m, _i, out):
            out = out.clone()
            draw = np.random.RandomState(seed).randn(out.shape[0] - 1, b - a, out.shape[2])
            out[1:, a:b] += noise * torch.from_numpy(draw).to(out.dtype)
            return out

        def restore_hook(pos):
            def hook(_m, _i, out):
                h = (out[0] if isinstance(out, tuple) else out).clone()
                h[1:, pos] = h[0, pos]
                return (h, *out[1:]) if isinstance(out, tuple) else h
            return hook

        hs = [modules[names["embed"]].register_forward_hook(noise_hook)]
        hs += [modules[name].register_forward_hook(restore_hook(pos)) for name, pos in states]
        try:
            with torch.no_grad():
                probs = torch.softmax(model(inp).logits[1:, -1, :], dim=1).mean(dim=0)[answer]
        finally:
            for h in hs:
                h.remove()
        return float(probs)

    low = patched([])
    grid = np.zeros((len(ids), n_layers))
    for t in range(len(ids)):
        for layer in range(n_layers):
            lo, hi = (layer, layer + 1) if kind == "hidden" else (max(0, layer - window // 2), min(n_layers, layer - (-window // 2)))
            grid[t, layer] = patched([(names[kind].format(x), t) for x in range(lo, hi)])
    return grid, low, float(clean[answer]), answer
