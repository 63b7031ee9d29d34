"""GradNorm for :class:`~evaldag.engine.adapters.hf.hf_adapter.HFAdapter`: per-sample
gradient norms, one backward pass per row or many rows in one pass.

Every way gives open-unlearning's number for a request: loss = -mean(log p of the
continuation, minus its last token if exclude_last), in train mode; value = mean over
the parameters that receive a gradient of ``||grad||_p``.

* :func:`one_row`: open-unlearning's batch of one, under a forked RNG seeded with 0.
* ghost norms (:mod:`.hf_ghost`): rows of any length in one batched backward, per-row
  norms from activations and their gradients (p = 2; Linear, Embedding, RMSNorm and
  LayerNorm weights; a weight shared only by tied input and output embeddings). The
  fastest on CPU (1.5x on the 4 x 256 Llama, 2.1x on SmolLM2-135M).
* :func:`many_rows`: ``torch.func.vmap(grad(loss))`` over rows of one length (no
  padding, no mask: each row runs the causal attention path of its one-row forward);
  for models ghost norms do not serve, on CUDA. Per-sample gradients of every
  parameter exist at once, so the caller bounds the rows.

Batched ways need a model with no active dropout (then train mode draws no random
numbers); vmap leaves rows holding the masked (pad) id to one_row (it has no mask), ghost
norms mask them as one_row does (every row of a model whose pad is its eos holds one).
They agree with one_row within float rounding (a few 1e-6 relative, float32; 2e-5 on
SmolLM2-135M, one_row's own rounding there). :class:`GradNormRunner` picks the way
(``mode``), checks ghost norms against one_row on the first row they serve, and keeps an
account of the rows (:meth:`GradNormRunner.account`, run.json's ``executor.served``).

torch is imported inside the functions.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any, Callable

from .grad_request import GradNorm
from .hf_ghost import ghost_norms, supported

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


GRAD_MODES = ("auto", "ghost", "vmap", "one_row")
# The largest relative difference from one_row that the first-row check accepts
# (float32 rounding is ~3e-6; a wrong rule is off by far more).
CHECK_RTOL = 1e-4


class GradNormRunner:
    """Serves GradNorm batches on one model: ``mode`` "auto" takes ghost norms where
    :func:`~.hf_ghost.supported` and the first row agrees with one_row, else vmap on
    CUDA, else one backward per row; ``rows`` bounds the rows per batched backward (1:
    always one_row)."""

    def __init__(self, model: Any, masked_id: int | None, mode: str = "auto", rows: int = 8, vmap_rows: int = 16,
                 split: tuple[Any, Any] | None = None):
        if mode not in GRAD_MODES:
            raise ValueError(f"grad_mode must be one of {GRAD_MODES}, not {mode!r}")
        self.model, self.masked_id, self.mode, self.rows, self.vmap_rows = model, masked_id, mode, rows, vmap_rows
        self.split = split  # (base, head) when logits == head(base(x)): ghost norms run the head on scored positions only
        self.used: list[str] | None = None  # parameters a one-row backward reaches
        self._way: str | None = None  # the way chosen for this model, once
        self.padded_tokens = 0  # tokens the last call computed, padding included
        self._checked = False  # ghost norms compared with one backward on a row they would serve
        self.why_not_ghost: str | None = None
        self.why_one_row: str | None = None  # why the way is one backward per row
        self.batched = 0  # rows served in batched backward passes
        self.alone: Counter[str] = Counter()  # rows that took one backward each, by why

    def way(self) -> str:
        if self._way is None:
            self._way = self._choose()
        return self._way

    def _choose(self) -> str:
        if self.mode == "one_row" or self.rows <= 1:
            self.why_one_row = "asked for (grad mode one_row, or 1 row per backward)"
            return "one_row"
        if not dropout_free(self.model):
            self.why_one_row = "dropout is active in train mode: each row draws its own random numbers"
            return "one_row"
        if self.mode in ("auto", "ghost"):
            self.why_not_ghost = supported(self.model)
            if self.why_not_ghost is None:
                return "ghost"
            if self.mode == "ghost":
                warnings.warn(f"GradNorm: ghost norms cannot serve this model ({self.why_not_ghost}); one backward per row")
                self.why_one_row = f"no ghost norms: {self.why_not_ghost}"
                return "one_row"
        if self.mode == "vmap" or self.model.device.type == "cuda":
            return "vmap"
        self.why_one_row = f"no ghost norms ({self.why_not_ghost}), and vmap serves CUDA only"
        return "one_row"

    def account(self) -> dict[str, Any]:
        """How this model's GradNorm rows were served (run.json's ``executor.served``): the
        way, rows in batched backward passes, rows that took one backward each by why."""
        out: dict[str, Any] = {"way": self.way(), "rows_batched": self.batched,
                               "rows_one_backward": sum(self.alone.values()), "one_backward_because": dict(self.alone)}
        if self.way() != "ghost" and self.why_not_ghost:
            out["why_not_ghost"] = self.why_not_ghost
        return out

    def _alone(self, r: GradNorm, why: str) -> float:
        self.alone[why] += 1
        return one_row(self.model, r, self.masked_id)[0]

    def __call__(self, reqs: list[GradNorm], on_row: Callable[[int, float], None] | None = None) -> list[float]:
        """The norms of ``reqs``; ``on_row(i, value)`` is called as each row's backward finishes (a
        row of a batched backward when its batch does), so a long stage is stored row by row."""
        model, out = self.model, [float("nan")] * len(reqs)

        def put(i: int, value: float) -> None:
            out[i] = value
            if on_row is not None:
                on_row(i, value)

        self.padded_tokens = sum(r.length() for r in reqs)
        was_training = model.training
        try:
            model.train()
            todo = [i for i, r in enumerate(reqs) if scored(r) > 0]
            done: list[int] = []
            if todo and self.used is None:
                first, self.used = one_row(model, reqs[todo[0]], self.masked_id)
                put(todo[0], first)
                self.alone["the first row: which parameters receive a gradient" if self.way() != "one_row"
                           else self._why_alone(reqs[todo[0]], "one_row")] += 1
                done, todo = todo[:1], todo[1:]
            if self.way() == "ghost" and not self._checked:
                # the first row ghost norms would serve, checked against its one-row backward
                probe = next((i for i in done + todo if self._batchable(reqs[i], "ghost")), None)
                if probe is not None:
                    if probe in todo:
                        put(probe, self._alone(reqs[probe], "the first row ghost norms serve: their check"))
                        todo.remove(probe)
                    self._check_ghost(reqs[probe], out[probe])
                    self._checked = True
            way = self.way()
            fits = [i for i in todo if way != "one_row" and self._batchable(reqs[i], way)]
            for i in sorted(set(todo) - set(fits)):
                put(i, self._alone(reqs[i], self._why_alone(reqs[i], way)))
            for part in self._parts(reqs, fits, way):
                rs = [reqs[i] for i in part]
                if way == "ghost":
                    got = self._ghost(rs)
                    self.padded_tokens += len(rs) * max(r.length() for r in rs) - sum(r.length() for r in rs)
                elif len(rs) > 1:
                    got = many_rows(model, rs, self.masked_id, self.used)
                else:
                    got = [self._alone(rs[0], "vmap: no other row of its length and p in the batch")]
                self.batched += len(rs) if len(rs) > 1 or way == "ghost" else 0
                for i, v in zip(part, got):
                    put(i, v)
            for i, r in enumerate(reqs):
                if scored(r) <= 0:  # nothing to score: NaN, handed back too
                    put(i, out[i])
        finally:
            model.zero_grad(set_to_none=True)
            model.train(was_training)
        return out

    def _why_alone(self, r: GradNorm, way: str) -> str:
        """Why a row the way does not take runs alone."""
        if way == "one_row":
            return self.why_one_row or "one backward per row"
        if way == "ghost":
            return f"p = {r.p:g}: ghost norms give L2 norms only"
        return "holds the masked (pad) id: vmap has no mask"

    def _batchable(self, r: GradNorm, way: str) -> bool:
        """Ghost norms take a row holding the masked (pad) id (they mask it as one_row does);
        vmap has no mask."""
        if way == "ghost":
            return r.p == 2
        return self.masked_id is None or self.masked_id not in r.context_ids + r.continuation_ids

    def _parts(self, reqs: list[GradNorm], idx: list[int], way: str) -> list[list[int]]:
        """Ghost: rows sorted by length, ``rows`` at a time; vmap: rows of one length and p."""
        if way == "ghost":
            idx = sorted(idx, key=lambda i: reqs[i].length())
            return [idx[a : a + self.rows] for a in range(0, len(idx), self.rows)]
        groups: dict[tuple, list[int]] = {}
        for i in idx:
            groups.setdefault((reqs[i].length(), reqs[i].p), []).append(i)
        n = max(1, min(self.rows, self.vmap_rows))
        return [g[a : a + n] for g in groups.values() for a in range(0, len(g), n)]

    def _ghost(self, rs: list[GradNorm]) -> list[float]:
        import torch

        norms = ghost_norms(self.model, [list(r.context_ids + r.continuation_ids) for r in rs],
                            [(len(r.context_ids), scored(r)) for r in rs], self.masked_id, self.split)
        return torch.stack([norms[k] for k in self.used]).mean(0).tolist()

    def _check_ghost(self, r: GradNorm, value: float) -> None:
        """Ghost norms must reproduce one_row on a row they serve, else this model is served one row at a time."""
        try:
            got = self._ghost([r])[0]
        except KeyError as e:  # a parameter one_row reaches that no ghost rule saw
            got, self.why_not_ghost = float("nan"), f"no ghost norm for parameter {e}"
        if not abs(got - value) <= CHECK_RTOL * abs(value):
            self.why_not_ghost = self.why_not_ghost or f"first row: ghost {got!r} vs one backward {value!r}"
            warnings.warn(f"GradNorm: ghost norms disagree with one backward per row ({self.why_not_ghost}); "
                          "serving this model one row at a time")
            self._way = "vmap" if self.model.device.type == "cuda" and self.mode != "ghost" else "one_row"
            self.why_one_row = f"ghost norms failed their check ({self.why_not_ghost})"
