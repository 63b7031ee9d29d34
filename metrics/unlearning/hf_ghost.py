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
it: no weight gradient is formed at all. Embeddings (rows that share a token id add up;
the padding_idx row receives nothing; Gemma's lookup times ``embed_scale`` has gradient
``e = g * embed_scale`` at the lookup's output), RMSNorm (Llama's and Gemma's) and
LayerNorm weights (``sum_t g_t * normalised_t``) and biases have their own exact rules
(GPT-2's Conv1D is a linear layer stored transposed).

A weight may be shared only as tied input and output embeddings, W [V, d] used by the
lookup (ids x_t, gradient e_t at its output) and by the head (hidden states h_s, logit
gradient g_s [V]). One row's gradient is G_emb + G_head, G_emb = sum_t onehot(x_t) e_t^T
and G_head = sum_s g_s h_s^T, so

    ||G_emb + G_head||^2 = ||G_emb||^2 + ||G_head||^2 + 2 sum_t sum_s g_s[x_t] (e_t . h_s),

each term from the rules above or from a [T, T] gather of the logit gradient and a
[T, T] product of e and h: O(T^2 d) per row, no [V, d] gradient. In a right-padded batch
padding positions carry zero e and g (their logits are not in the loss, and no real
position attends to them), so each row's sums are its own. Every parameter-holding
module must be one of those kinds: :func:`supported` says why not when it is not, and the
caller checks the first row against a one-row backward before trusting it.

Measured on the 4 x 256 Llama of tests/perf/bench_tofu_scale.py (CPU, one thread, rows
of 30-80 tokens sorted by length): 16.6 ms per row in batches of 8 against 25.2 ms for
one backward per row (1.5x); the largest relative difference 2.9e-6 (float32 rounding of
the batched forward and of the Gram sums). On SmolLM2-135M (tied) tests/perf/bench_grad_tied.py
gives the figures; there one backward's own float32 weight gradients are 2.1e-5 off a
float64 backward, ghost norms 4.5e-7.

torch is imported inside the functions.
"""

from __future__ import annotations

from typing import Any, Callable

# Heavy imports (torch) happen inside the functions that use them: a warm rerun never pays for them.

NORM_CLASSES = ("RMSNorm",)  # class-name suffix of Llama- and Gemma-style RMSNorm


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
    if isinstance(module, torch.nn.Embedding) and module.max_norm is None and not module.scale_grad_by_freq:
        # a plain lookup, or Gemma's lookup times a constant embed_scale
        plain = type(module).forward is torch.nn.Embedding.forward
        return "embedding" if plain or hasattr(module, "embed_scale") else "?"
    if isinstance(module, torch.nn.LayerNorm) and module.weight is not None and len(module.normalized_shape) == 1:
        return "layernorm"
    if type(module).__name__.endswith(NORM_CLASSES) and own == ["weight"]:
        if hasattr(module, "variance_epsilon"):  # Llama: weight * (x * rsqrt(mean(x^2) + eps)).to(dtype)
            return "rmsnorm"
        if hasattr(module, "eps") and hasattr(module, "_norm"):  # Gemma: (_norm(x.float()) * (1 + weight)).type_as(x)
            return "rmsnorm_f32"
    return "?"


def _holders(model: Any) -> dict[int, list[tuple[str, Any, str | None]]]:
    """Parameter id -> [(its name under a module, that module, the module's rule)], in
    named_parameters order: the first name is the one ``model.named_parameters()`` gives."""
    out: dict[int, list[tuple[str, Any, str | None]]] = {}
    for name, module in model.named_modules():
        kind = _kind(module)
        for pname, p in module.named_parameters(recurse=False):
            out.setdefault(id(p), []).append((f"{name}.{pname}" if name else pname, module, kind))
    return out


def _tied_embedding(holders: list[tuple[str, Any, str | None]]) -> bool:
    """An embedding's weight that is also a bias-free or biased linear head's weight (tied
    input and output embeddings): the one sharing with a cross-term rule."""
    import torch

    kinds = sorted((k, n.rsplit(".", 1)[-1]) for n, _, k in holders)
    head = next((m for _, m, k in holders if k == "linear"), None)
    return kinds == [("embedding", "weight"), ("linear", "weight")] and isinstance(head, torch.nn.Linear)


def supported(model: Any) -> str | None:
    """None if ghost norms serve ``model``; else why not (a module kind or a shared weight)."""
    for name, module in model.named_modules():
        if _kind(module) == "?":
            return f"module {name or '<root>'} ({type(module).__name__}) has no ghost-norm rule"
    for holders in _holders(model).values():
        if len(holders) > 1 and not _tied_embedding(holders):
            return (f"parameter {holders[1][0]} is shared with {holders[0][0]}, "
                    "and only an embedding tied to a linear head has a cross-term rule")
    return None


def _gram(x: Any) -> Any:
    return x @ x.transpose(1, 2)


def _linear_sq(a: Any, g: Any, a_gram: Any | None) -> Any:
    """Per-row ||g_b^T a_b||_F^2 for a [B, T, in], g [B, T, out], the cheaper way round."""
    t, n_in, n_out = a.shape[1], a.shape[2], g.shape[2]
    if t * t <= n_in * n_out:
        return ((a_gram if a_gram is not None else _gram(a)) * _gram(g)).sum((1, 2))
    return (g.transpose(1, 2) @ a).square().sum((1, 2))


class _Tie:
    """One tied weight W [V, d], used as an embedding (``x`` ids [B, T] -> W[x], with
    gradient ``e`` at the lookup's output before any scaling) and as a head (logits
    ``h W^T`` of hidden states ``h`` [B, S, d], with gradient ``g`` [B, S, V]). Per row,
    <G_emb, G_head> = sum_t sum_s g_s[x_t] (e_t . h_s): ``u_t = sum_s g_s[x_t] h_s`` is
    formed when the head's gradient arrives (first: backward reaches the logits before the
    embedding), the sum with ``e`` when the embedding's does. Positions holding the
    embedding's padding_idx (no gradient there) and padding (zero gradient) add nothing."""

    def __init__(self, key: str):
        self.key = key
        self.x: Any = None  # ids, from the embedding's forward
        self.keep: Any = None  # 1.0 where x is not the padding_idx
        self.u: Any = None
        self.e: Any = None

    def head(self, h: Any, g: Any) -> Any | None:
        b, s, t = g.shape[0], g.shape[1], self.x.shape[1]
        a = g.gather(2, self.x[:, None, :].expand(b, s, t)) * self.keep[:, None, :]  # [B, S, T]: g_s[x_t]
        self.u = a.transpose(1, 2) @ h  # [B, T, d]
        return self.cross()

    def embedding(self, e: Any) -> Any | None:
        self.e = e
        return self.cross()

    def cross(self) -> Any | None:
        """2 <G_emb, G_head> per row, once both halves have arrived."""
        if self.u is None or self.e is None:
            return None
        out = 2 * (self.e * self.u).sum((1, 2))
        self.u = self.e = None
        return out


class _Recorder:
    """Forward hooks that, when the output's gradient arrives, add each parameter's
    per-row squared norm to ``sq`` (name -> [B] float32, under the name
    ``model.named_parameters()`` gives; a tied weight's two uses add up there, with their
    cross term)."""

    def __init__(self, model: Any, rows: int):
        self.rows = rows
        self.sq: dict[str, Any] = {}
        self._grams: dict[int, tuple[Any, Any]] = {}  # input tensor id -> (tensor, its Gram): q/k/v share one
        self._names = {m: k for k, m in model.named_modules()}
        self._keys: dict[tuple[Any, str], str] = {}  # (module, its parameter's attribute) -> the name it counts under
        self._ties: dict[Any, _Tie] = {}  # each module of a tied embedding -> their shared _Tie
        for holders in _holders(model).values():
            tie = _Tie(holders[0][0]) if len(holders) > 1 else None
            for name, module, _ in holders:
                self._keys[(module, name.rsplit(".", 1)[-1])] = holders[0][0]
                if tie is not None:
                    self._ties[module] = tie
        self.handles = [m.register_forward_hook(self._hook(_kind(m))) for m in model.modules() if _kind(m)]

    def _put(self, module: Any, attr: str, value: Any) -> None:
        name = self._keys[(module, attr)]
        self.sq[name] = self.sq[name] + value if name in self.sq else value

    def _hook(self, kind: str) -> Callable:
        def hook(module: Any, inputs: tuple, out: Any) -> Any:
            name, x = self._names[module], inputs[0]
            if out.shape[0] != self.rows:  # e.g. position embeddings of [1, T] ids, broadcast over the rows
                raise ValueError(f"ghost norms: {name} ran on {out.shape[0]} rows, not one per sample ({self.rows})")
            if kind == "embedding":
                out.requires_grad_(True)  # parameters are frozen: the graph starts here
                if module in self._ties:
                    tie = self._ties[module]
                    tie.x, tie.keep = x.flatten(1), _kept(module, x).flatten(1)
            out.register_hook(lambda g: self._on_grad(kind, module, x, g.detach()))
            return out
        return hook

    def _on_grad(self, kind: str, module: Any, x: Any, g: Any) -> None:
        g = g.float().flatten(1, -2)
        tie = self._ties.get(module)
        if kind == "embedding":
            scale = getattr(module, "embed_scale", None)  # Gemma's lookup * embed_scale: e = g * embed_scale
            e = g if scale is None else g * scale.to(module.weight.dtype).float()
            ids, keep = x.flatten(1), _kept(module, x).flatten(1)
            same = (ids[:, :, None] == ids[:, None, :]).float() * keep[:, :, None] * keep[:, None, :]
            self._put(module, "weight", (same * _gram(e)).sum((1, 2)))
            cross = tie.embedding(e) if tie is not None else None
        elif kind == "linear":
            a = x.detach().float().flatten(1, -2)
            cached = self._grams.get(id(x))
            a_gram = cached[1] if cached is not None and cached[0] is x else None
            if a_gram is None and a.shape[1] ** 2 <= module.weight.numel():
                a_gram = _gram(a)
                self._grams[id(x)] = (x, a_gram)
            self._put(module, "weight", _linear_sq(a, g, a_gram))
            cross = tie.head(a, g) if tie is not None else None
        else:
            h, cross = x.detach().float(), None
            if kind == "rmsnorm":  # Llama's: x * rsqrt(mean(x^2) + eps), cast back, times weight
                n = (h * (h.pow(2).mean(-1, keepdim=True) + module.variance_epsilon).rsqrt()).to(x.dtype).float()
            elif kind == "rmsnorm_f32":  # Gemma's: the same in float32, times (1 + weight)
                n = h * (h.pow(2).mean(-1, keepdim=True) + module.eps).rsqrt()
            else:
                n = (h - h.mean(-1, keepdim=True)) * (h.var(-1, unbiased=False, keepdim=True) + module.eps).rsqrt()
            self._put(module, "weight", (g * n.flatten(1, -2)).sum(1).square().sum(1))
        if cross is not None:
            self._put(module, "weight", cross)
        if getattr(module, "bias", None) is not None:
            self._put(module, "bias", g.sum(1).square().sum(1))

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self._grams.clear()


def _kept(module: Any, ids: Any) -> Any:
    """1.0 where a looked-up id receives a gradient: not the embedding's padding_idx."""
    keep = ids != module.padding_idx if module.padding_idx is not None else ids >= 0
    return keep.float()


def ghost_norms(model: Any, seqs: list[list[int]], spans: list[tuple[int, int]], masked_id: int | None,
                split: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """Per-row L2 norm of every parameter's gradient (name -> [B] tensor), the loss of row
    b being minus the mean log-prob of its tokens ``spans[b] = (start, n)`` (positions
    start .. start + n - 1, each predicted from the one before). Rows are right-padded and
    the padding masked; with ``masked_id`` every real token equal to it is masked too
    (open-unlearning's ``ids != pad`` mask).

    ``split`` is (base model, output head) where ``logits == head(base(x))`` (the adapter's
    ``head_split``): then the head runs on each row's scored positions only (right-padded to
    the batch's longest span, the padding weighted 0), not on the question's, whose logits
    get no gradient: the same norms, without the vocabulary-wide forward, backward and Gram
    of positions that add nothing (on SmolLM2's chat template about 60 % of a row)."""
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
            inputs = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "use_cache": False}
            if split is None:
                logits = model(**inputs).logits
                logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
                loss = -(logp.gather(2, ids[:, 1:, None])[..., 0] * weight).sum()
            else:
                at, w, tgt = _scored_positions(spans, dev)
                hidden = split[0](**inputs)[0]
                picked = hidden.gather(1, at[:, :, None].expand(-1, -1, hidden.shape[-1]))
                logp = torch.log_softmax(split[1](picked).float(), dim=-1)
                loss = -(logp.gather(2, ids.gather(1, tgt)[:, :, None])[..., 0] * w).sum()
            loss.backward()
    finally:
        rec.close()
        for p, flag in frozen:
            p.requires_grad_(flag)
    return {k: v.clamp_min(0).sqrt() for k, v in rec.sq.items()}


def _scored_positions(spans: list[tuple[int, int]], dev: Any) -> tuple[Any, Any, Any]:
    """Per row, the positions whose logits predict its scored tokens (start - 1 .. start + n - 2),
    their weights (1 / n) and the targets' positions, right-padded with position 0, weight 0."""
    import torch

    longest = max(n for _, n in spans)
    at = torch.zeros((len(spans), longest), dtype=torch.long)
    w = torch.zeros((len(spans), longest), dtype=torch.float32)
    for b, (start, n) in enumerate(spans):
        at[b, :n] = torch.arange(start - 1, start - 1 + n)
        w[b, :n] = 1.0 / n
    return at.to(dev), w.to(dev), (at + (w > 0).long()).to(dev)
