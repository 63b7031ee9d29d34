"""A small worked example graph: the metrics behind ``evaldag run`` with no arguments.

They run on the engine's numpy bigram model (``engine.adapters.toy``) and a few
question/answer rows shipped in ``benchmarks/toy.py``, so the whole engine (scorers,
requests, the executor, aggregators, the store) is exercised in well under a second.
The real metric library (TOFU, MUSE, WEAT) follows the same pattern.
"""

from __future__ import annotations

import numpy as np

from ..engine import GenerationSettings, Generate, Params, Result, TokenStats, metric
from ..engine.requests import pack_token_stats, unpack_token_stats
from ..engine.adapters.base import PromptTemplate


class StatsParams(Params):
    field: str = "answer"
    template: PromptTemplate = PromptTemplate()


@metric("toy_answer_stats", version="1", params=StatsParams, needs=("model", "data"),
        requests={"model": {"token_stats": ("logprob",)}})
def toy_answer_stats(model, data, params: StatsParams):
    """Per-token stats of each row's answer given its question (one request per row)."""
    enc = model.encoder()
    pairs = [enc.encode_qa(row["question"], row[params.field], params.template) for row in data]
    results = yield [TokenStats(e.context_ids, e.continuation_ids) for e in pairs]
    return pack_token_stats(results)


@metric("toy_probability", version="1", parents={"stats": "toy_answer_stats"})
def toy_probability(stats) -> Result:
    """Length-normalised probability exp(-mean NLL) per item, averaged."""
    losses = [float(-np.mean(s.logprob, dtype=np.float64)) for s in unpack_token_stats(stats)]
    probs = [float(np.exp(-x)) for x in losses]
    vbi = {str(i): {"prob": p, "avg_loss": a} for i, (p, a) in enumerate(zip(probs, losses))}
    return Result(float(np.mean(probs)), vbi)


class MinKParams(Params):
    k: float = 0.2


@metric("toy_min_k", version="1", params=MinKParams, parents={"stats": "toy_answer_stats"})
def toy_min_k(stats, params: MinKParams) -> Result:
    """Mean of the lowest k-fraction token log-probs, negated (a Min-K%-style score)."""
    scores = []
    for s in unpack_token_stats(stats):
        lp = np.sort(s.logprob.astype(np.float64))
        n = max(1, int(len(lp) * params.k))
        scores.append(float(-lp[:n].mean()))
    return Result(float(np.mean(scores)), {str(i): {"score": x} for i, x in enumerate(scores)})


@metric("toy_greedy", version="1", params=StatsParams, needs=("model", "data"), requests={"model": {"generate": ()}})
def toy_greedy(model, data, params: StatsParams):
    """Greedy generations for each question (16 new tokens)."""
    enc = model.encoder()
    prompts = [enc.encode_qa(row["question"], row[params.field], params.template).prompt_ids for row in data]
    results = yield [Generate(p, GenerationSettings(max_new_tokens=16)) for p in prompts]
    return [r.text for r in results]


@metric("toy_first_char_match", version="1", parents={"gen": "toy_greedy"}, needs=("data",))
def toy_first_char_match(gen, data) -> Result:
    """Share of generations whose first character equals the answer's."""
    hits = [float(bool(g) and g[0] == row["answer"][0]) for g, row in zip(gen, data)]
    return Result(float(np.mean(hits)), {str(i): {"score": h} for i, h in enumerate(hits)})


@metric("toy_summary", version="1", parents={"prob": "toy_probability", "mink": "toy_min_k"})
def toy_summary(prob: Result, mink: Result) -> Result:
    """Ratio of the two headline numbers (an aggregator over aggregators)."""
    return Result(prob.agg_value / (1.0 + mink.agg_value))
