"""ROME's causal trace (Meng et al. 2022, ``calculate_hidden_flow``) on the original model.

For each traced edit the subject's token embeddings are corrupted with Gaussian noise
(std ``noise``; by default ``noise_factor`` x the std of the subject-token embeddings,
ROME's ``3 * collect_embedding_std``), ``samples`` copies, ``numpy.random.RandomState(seed)``
noise. Then for every (position, layer) the clean run's state is restored: the block
output (``restore="hidden"``), or the MLP / attention outputs of a ``window`` of layers
around it. Each cell records P(answer) at the last position, the answer being the clean
run's argmax token (ROME, lm-debugger) or the edit's ``target_true`` first token.

Every cell is one :class:`~.trace_backend.CausalTrace` request: the executor
batches the cells (two forward passes per batch) and caches each one.

Per edit the value holds the [positions x layers] grid, the corrupted ("low") and clean
("high") scores, the subject's token range, the peak cell, and ROME's two sites as rows
(``subject_last``, ``last``: best layer, its depth, its indirect effect). ``agg_value``
is the mean over edits of the largest indirect effect, ``max(grid) - low``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ...engine import HiddenStates, Params, Result, metric
from .trace_backend import CausalTrace
from .prompts import check_edit, encode, subject_range, target_ids


class TraceParams(Params):
    restore: Literal["hidden", "mlp", "attn"] = "hidden"
    window: int = 10                   # mlp / attn: layers restored around each layer (hidden: 1)
    samples: int = 10
    seed: int = 1
    noise: float | None = None         # absolute noise std; None: noise_factor x embedding std
    noise_factor: float = 3.0
    answer: Literal["argmax", "target_true"] = "argmax"
    edits: tuple[int, ...] | None = None  # indices of the edits to trace (None: all)
    occurrence: Literal["first", "last"] = "first"  # which mention of the subject is corrupted (ROME: first)


@metric("embedding_std", version="1", needs=("base_model", "edits"), requests={"base_model": {"hidden_states": ()}})
def embedding_std(base_model: Any, edits: list[dict]):
    """Std of the input embeddings of every subject's tokens (ROME's ``collect_embedding_std``)."""
    enc = base_model.encoder()
    subjects = list(dict.fromkeys(row["subject"] for row in edits))
    got = yield [("base_model", HiddenStates(encode(enc, s, special=False), (0,))) for s in subjects]
    values = np.concatenate([g.states[0].reshape(-1).astype(np.float64) for g in got])
    return float(np.std(values, ddof=1))  # torch's Tensor.std() is the unbiased one


def _parents(p: TraceParams) -> dict:
    return {} if p.noise is not None else {"emb_std": "embedding_std"}


def _chosen(edits: list[dict], which: tuple[int, ...] | None) -> list[int]:
    idx = list(range(len(edits))) if which is None else list(which)
    bad = [i for i in idx if not 0 <= i < len(edits)]
    if bad:
        raise ValueError(f"causal_trace: edit indices {bad} out of range (the set has {len(edits)} edits)")
    return idx


@metric("causal_trace", version="1", params=TraceParams, needs=("base_model", "edits"), parents=_parents,
        requests={"base_model": {"causal_trace": ()}})
def causal_trace(base_model: Any, edits: list[dict], params: TraceParams, emb_std: float | None = None):
    """ROME's causal trace: P(answer) with the subject corrupted and one state restored, per (position, layer)."""
    enc = base_model.encoder()
    noise = float(params.noise) if params.noise is not None else params.noise_factor * float(emb_std)
    chosen = _chosen(edits, params.edits)
    traced = []
    for i in chosen:
        row = edits[i]
        check_edit(row, i)
        ids = encode(enc, row["prompt"])
        subj = subject_range(enc, ids, row["subject"], row["prompt"], params.occurrence)
        answer = target_ids(enc, row["target_true"])[0] if params.answer == "target_true" else -1
        traced.append((i, CausalTrace(ids, subj, noise, params.samples, params.seed, "none", answer=answer)))
    base = yield [("base_model", req) for _, req in traced]
    window = 1 if params.restore == "hidden" else params.window
    cells = []
    for (_, req), b in zip(traced, base):
        for t in range(len(req.ids)):
            for layer in range(b.n_layers):
                cells.append(CausalTrace(req.ids, req.subject, noise, params.samples, params.seed, params.restore,
                                         layer, t, window, b.answer))
    got = yield [("base_model", c) for c in cells]
    vbi, at, effects, at_last, sites = {}, 0, [], [], {"subject_last": [], "last": []}
    for (i, req), b in zip(traced, base):
        n = len(req.ids) * b.n_layers
        grid = np.array([g.prob for g in got[at : at + n]], dtype=np.float64).reshape(len(req.ids), b.n_layers)
        at += n
        t, layer = (int(x) for x in np.unravel_index(int(np.argmax(grid)), grid.shape))
        effects.append(float(grid.max()) - b.prob)
        at_last.append(t == req.subject[1] - 1)
        item = {"scores": grid.tolist(), "low": b.prob, "high": b.clean_prob, "subject": list(req.subject),
                "tokens": [enc.decode([x], skip_special_tokens=False) for x in req.ids],
                "answer_id": b.answer, "answer": enc.decode([b.answer], skip_special_tokens=False),
                "peak": [t, layer], "peak_score": float(grid.max())}
        for site, pos in (("subject_last", req.subject[1] - 1), ("last", len(req.ids) - 1)):
            item[site] = _site(grid[pos], b.prob, pos)
            sites[site].append(item[site])
        vbi[str(i)] = item
    if not vbi:
        return Result.nan("no edits to trace")
    extra = {"restore": params.restore, "window": window, "noise": noise, "samples": params.samples,
             "peak_at_last_subject_token": float(np.mean(at_last))}
    for site, rows in sites.items():
        extra[f"{site}_effect"] = float(np.mean([r["effect"] for r in rows]))
        extra[f"{site}_depth"] = float(np.mean([r["depth"] for r in rows]))
    return Result(agg_value=float(np.mean(effects)), value_by_index=vbi, extra=extra)


def _site(row: np.ndarray, low: float, position: int) -> dict:
    """One position's row of the grid: its best layer, that layer's relative depth
    (0 first, 1 last) and its indirect effect (score - low). ROME's two sites are rows:
    the subject's last token (its "early site", in the middle layers of a large model)
    and the last token (the "late site"). The grid's overall peak says little for
    ``restore="hidden"``: restoring the last token's final state gives back the clean
    output exactly, so that cell always scores "high"."""
    best = int(np.argmax(row))
    return {"position": int(position), "best_layer": best, "depth": best / max(1, len(row) - 1),
            "effect": float(row[best]) - low}
