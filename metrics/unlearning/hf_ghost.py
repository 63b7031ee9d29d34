"""Per-sample gradient norms of many rows from one batched backward pass ("ghost norms").

open-unlearning's GradNorm needs, for every row, the L2 norm of each parameter's
gradient of that row's loss. One backward per row gets it directly but runs the model
at batch size one; ``torch.func.vmap`` batches the rows but materialises every row's
full gradient (and loops over rows inside attention on CPU). The ghost-norm identity
(Goodfellow 2015; Li et al. 2022, "Large language models can be strong differentially
private learners") needs neither: for a linear layer with input ``a`` [T, in] and output
gradient ``g`` [T, out] of one row, that row's weight gradient is ``g^T a`` and

    ||g^T a||_F^2 = sum over t, s of (a_t . a_s) (g_t . g_s),

two [T, T] Gram matrices, cheaper than the [out, in] gradient when T^2 < in * out. The
rows' losses are summed, so one backward gives every row its own activation gradients
(rows never mix in a causal LM without batch norm), and the parameters are frozen for
it: no weight gradient is formed at all. Embeddings (rows that share a token id add up),
RMSNorm and LayerNorm weights (``sum_t g_t * normalised_t``) and biases have their own
exact rules (GPT-2's Conv1D is a linear layer stored transposed). Every parameter-holding module must be one of those kinds and no weight may
be shared (tied embeddings would need cross terms): :func:`supported` says so, and the
caller checks the first row against a one-row backward before trusting it.

Measured on the 4 x 256 Llama of tests/perf/bench_tofu_scale.py (CPU, one thread, rows
of 30-80 tokens sorted by length): 16.6 ms per row in batches of 8 against 25.2 ms for
one backward per row (1.5x); the largest relative difference 2.9e-6 (float32 rounding of
the batched forward and of the Gram sums).

torch is imported inside the functions.
"""

from __future__ import annotations

from typing import Any, Callable

# Heavy imports (torch) happen inside the functions that use them: a warm rerun never pays for them.

NORM_CLASSES = ("RMSNorm",)  # class-name suffix of Llama-style RMSNorm (weight * x / rms(x))


def _kind(module: Any) -> str | None:
    """Which ghost rule serves ``module``'s own parameters: None if it holds none, "?" if unknown."""
    import torch

    own = [k for k, _ in module.named_parameters(recurse=False)]
    if not own:
        return None
    if isinstance(module, torch.nn.Linear):
        return "linear"
    if type(module).__name__ == "Conv1D" and module.weight.dim() == 2:  # GPT-2's transposed linear: x @ W + b
        return "linear"
    if isinstance(module, torch.nn.Embedding) and module.max_norm is None:
        return "embedding"
    if isinstance(module, torch.nn.LayerNorm) and module.weight is not None and len(module.normalized_shape) == 1:
        return "layernorm"
    if type(module).__name__.endswith(NORM_CLASSES) and hasattr(module, "variance_epsilon") and own == ["weight"]:
        return "rmsnorm"
    return "?"


def supported(model: Any) -> str | None:
    """None if ghost norms serve ``model``; else why not (a module kind or a shared weight)."""
    seen: dict[int, str] = {}
    for name, module in model.named_modules():
        kind = _kind(module)
        if kind == "?":
            return f"module {name or '<root>'} ({type(module).__name__}) has no ghost-norm rule"
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                return f"parameter {name}.{pname} is shared with {seen[id(p)]}"
            seen[id(p)] = f"{name}.{pname}"
    return None


def _gram(x: Any) -> Any:
    return x @ x.transpose(1, 2)


def _linear_sq(a: Any, g: Any, a_gram: Any | None) -> Any:
    """Per-row ||g_b^T a_b||_F^2 for a [B, T, in], g [B, T, out], the cheaper way round."""
    t, n_in, n_out = a.shape[1], a.shape[2], g.shape[2]
    if t * t <= n_in * n_out:
        return ((a_gram if a_gram is not None else _gram(a)) * _gram(g)).sum((1, 2))
    return (g.transpose(1, 2) @ a).square().sum((1, 2))


class _Recorder:
    """Forward hooks that, when the output's gradient arrives, add each parameter's
    per-row squared norm to ``sq`` (name -> [B] float32)."""

    def __init__(self, model: Any, rows: int):
        self.rows = rows
        self.sq: dict[str, Any] = {}
        self._grams: dict[int, tuple[Any, Any]] = {}  # input tensor id -> (tensor, its Gram): q/k/v share one
        self._names = {m: k for k, m in model.named_modules()}
        self.handles = [m.register_forward_hook(self._hook(_kind(m))) for m in model.modules() if _kind(m)]

    def _put(self, name: str, value: Any) -> None:
        self.sq[name] = self.sq[name] + value if name in self.sq else value

    def _hook(self, kind: str) -> Callable:
        def hook(module: Any, inputs: tuple, out: Any) -> Any:
            name, x = self._names[module], inputs[0]
            if out.shape[0] != self.rows:  # e.g. position embeddings of [1, T] ids, broadcast over the rows
                raise ValueError(f"ghost norms: {name} ran on {out.shape[0]} rows, not one per sample ({self.rows})")
            if kind == "embedding":
                out.requires_grad_(True)  # parameters are frozen: the graph starts here
            out.register_hook(lambda g: self._on_grad(kind, module, name, x, g.detach()))
            return out
        return hook

    def _on_grad(self, kind: str, module: Any, name: str, x: Any, g: Any) -> None:
        g = g.float().flatten(1, -2)
        if kind == "embedding":
            same = (x.flatten(1)[:, :, None] == x.flatten(1)[:, None, :]).float()
            self._put(f"{name}.weight", (same * _gram(g)).sum((1, 2)))
            return
        if kind == "linear":
            a = x.detach().float().flatten(1, -2)
            cached = self._grams.get(id(x))
            a_gram = cached[1] if cached is not None and cached[0] is x else None
            if a_gram is None and a.shape[1] ** 2 <= module.weight.numel():
                a_gram = _gram(a)
                self._grams[id(x)] = (x, a_gram)
            self._put(f"{name}.weight", _linear_sq(a, g, a_gram))
        else:
            h = x.detach().float()
            if kind == "rmsnorm":  # Llama's: x * rsqrt(mean(x^2) + eps), cast back, times weight
                n = (h * (h.pow(2).mean(-1, keepdim=True) + module.variance_epsilon).rsqrt()).to(x.dtype).float()
            else:
                n = (h - h.mean(-1, keepdim=True)) * (h.var(-1, unbiased=False, keepdim=True) + module.eps).rsqrt()
            self._put(f"{name}.weight", (g * n.flatten(1, -2)).sum(1).square().sum(1))
        if getattr(module, "bias", None) is not None:
            self._put(f"{name}.bias", g.sum(1).square().sum(1))

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self._grams.clear()


def ghost_norms(model: Any, seqs: list[list[int]], spans: list[tuple[int, int]], masked_id: int | None) -> dict[str, Any]:
    """Per-row L2 norm of every parameter's gradient (name -> [B] tensor), the loss of row
    b being minus the mean log-prob of its tokens ``spans[b] = (start, n)`` (positions
    start .. start + n - 1, each predicted from the one before). Rows are right-padded and
    the padding masked; with ``masked_id`` every real token equal to it is masked too
    (open-unlearning's ``ids != pad`` mask)."""
    import torch

    dev = model.device
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long, device=dev)
    real = torch.zeros_like(ids)
    weight = torch.zeros((len(seqs), width - 1), dtype=torch.float32, device=dev)
    for b, (s, (start, n)) in enumerate(zip(seqs, spans)):
        ids[b, : len(s)] = torch.tensor(s, device=dev)
        real[b, : len(s)] = 1
        weight[b, start - 1 : start - 1 + n] = 1.0 / n
    mask = real if masked_id is None else real * (ids != masked_id).long()
    pos = torch.arange(width, device=dev).expand(len(seqs), width)  # one row each: a [1, T] broadcast would mix rows
    rec = _Recorder(model, len(seqs))
    frozen = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in frozen:
            p.requires_grad_(False)
        with torch.enable_grad():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            loss = -(logp.gather(2, ids[:, 1:, None])[..., 0] * weight).sum()
            loss.backward()
    finally:
        rec.close()
        for p, flag in frozen:
            p.requires_grad_(flag)
    return {k: v.clamp_min(0).sqrt() for k, v in rec.sq.items()}
