"""The causal-trace request kind and its HF handler: ROME's patched forward passes, batched.

The kind belongs to the editing family, so it lives here, not in the engine: importing
this module registers :class:`CausalTrace` (``requests.register_kind``) and its handler
on :class:`~evaldag.engine.adapters.hf.hf_adapter.HFAdapter` (``HFAdapter.handlers``), which
uses the adapter's public ``pad`` / ``head_split`` / ``record_tokens`` only.

A batch of :class:`CausalTrace` cells runs in two forward passes,
however many (layer, position) cells it holds:

1. a clean pass over each distinct prompt, recording the output of every module some
   cell restores (and the clean P(answer) at the last position);
2. one corrupted pass over ``samples`` rows per cell: forward hooks add each cell's
   seeded noise to the subject's token embeddings and write the clean state back at the
   cell's (module, position); P(answer) at the last position is averaged over the cell's
   rows.

Rows are right padded, so every real position sees exactly what it would see alone.
Module names come from the engine's ``layer_names``. torch is imported inside functions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from ...engine.adapters.hf.hf_adapter import HFAdapter
from ...engine.adapters.layer_names import layer_names, num_layers
from ...engine.requests import ArrayResult, Request, register_kind

@dataclass(frozen=True)
class CausalTrace(Request):
    """One cell of ROME's causal trace (Meng et al. 2022): a patched forward pass.

    ``samples`` copies of ``ids`` get Gaussian noise of std ``noise`` on the token
    embeddings of ``subject`` (token range [start, end)); the noise is
    ``numpy.random.RandomState(seed).randn(samples, end - start, hidden)``, the same for
    every cell of a trace, as in ROME. Then the clean run's ``restore`` state
    (``"hidden"``: the block output; ``"mlp"``/``"attn"``: that module's output, for the
    layers ``[layer - window // 2, layer + ceil(window / 2))`` clipped to the model) is put
    back at ``position``. ``restore="none"`` restores nothing (the corrupted baseline).
    The result is the mean over the copies of P(``answer``) at the last position;
    ``answer=-1`` means the clean run's argmax token.
    """

    ids: tuple[int, ...]
    subject: tuple[int, int]
    noise: float
    samples: int = 10
    seed: int = 1
    restore: str = "hidden"
    layer: int = -1
    position: int = -1
    window: int = 1
    answer: int = -1
    kind: ClassVar[str] = "causal_trace"
    words: ClassVar[str] = "patched forward passes"
    padding_side: ClassVar[str] = "right"

    def __post_init__(self) -> None:
        a, b = self.subject
        if not 0 <= a < b <= len(self.ids):
            raise ValueError(f"CausalTrace: subject range {self.subject} is not inside the {len(self.ids)} prompt tokens")
        if self.restore not in ("none", "hidden", "mlp", "attn"):
            raise ValueError(f"CausalTrace: restore must be none, hidden, mlp or attn, not {self.restore!r}")
        if self.restore != "none" and not (0 <= self.position < len(self.ids) and self.layer >= 0):
            raise ValueError(f"CausalTrace: position {self.position} / layer {self.layer} out of range")
        if self.samples < 1 or self.window < 1:
            raise ValueError("CausalTrace: samples and window must be >= 1")

    def length(self) -> int:
        return len(self.ids) * self.samples

    def restored_layers(self, n_layers: int) -> list[int]:
        """The layers whose ``restore`` output is put back (ROME's window, clipped)."""
        if self.restore == "none":
            return []
        if not 0 <= self.layer < n_layers:
            raise ValueError(f"CausalTrace: layer {self.layer} is out of range for a model with {n_layers} layers")
        return list(range(max(0, self.layer - self.window // 2), min(n_layers, self.layer - (-self.window // 2))))


@dataclass
class CausalTraceResult(ArrayResult):
    """P(answer) averaged over the corrupted copies, the clean run's P(answer), the answer, the layer count."""

    prob: float
    clean_prob: float
    answer: int
    n_layers: int

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"probs": np.asarray([self.prob, self.clean_prob], dtype=np.float64)}

    def meta(self) -> dict:
        return {"answer": int(self.answer), "n_layers": int(self.n_layers)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict) -> "CausalTraceResult":
        return cls(float(arrays["probs"][0]), float(arrays["probs"][1]), int(meta["answer"]), int(meta["n_layers"]))



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


register_kind(CausalTrace, CausalTraceResult)
HFAdapter.handlers.add("causal_trace", run_causal_traces)
