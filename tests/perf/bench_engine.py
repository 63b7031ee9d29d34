"""Cold vs warm wall time of a graph of ~60 nodes (goal: warm <= 5 % of cold).

Run: python tests/perf/bench_engine.py
A scorer over 2,000 rows on the engine's numpy bigram model feeds 20 aggregators,
each of which does some real numpy work; 40 more aggregators sit on top of those.
The warm rerun reads every node from the store and never loads the model.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np

from evaldag.engine import Params, Result, Rows, TokenStats, metric, run
from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine.requests import pack_token_stats, unpack_token_stats


class I(Params):
    i: int = 0


@metric("bench_stats", version="1", needs=("model", "data"), register=False)
def stats(model, data):
    enc = model.encoder()
    res = yield [TokenStats(tuple(enc.encode(r["q"], add_special_tokens=False)), tuple(enc.encode(r["a"], add_special_tokens=False))) for r in data]
    return pack_token_stats(res)


@metric("bench_agg", version="1", params=I, parents={"s": stats()}, register=False)
def agg(s, params):
    lp = s["logprob"].astype(np.float64)
    acc = 0.0
    for _ in range(40):  # stand-in for real aggregation work (bootstrap, sorting...)
        acc += float(np.sort(lp * (params.i + 1)).cumsum()[-1])
    items = unpack_token_stats(s)[:200]
    return Result(acc, {str(j): {"v": float(x.logprob.sum())} for j, x in enumerate(items)})


@metric("bench_top", version="1", params=I, parents={"a": agg(), "b": agg(i=1)}, register=False)
def top(a, b, params):
    return Result(a.agg_value - b.agg_value + params.i)


def main() -> None:
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    rows = [{"q": " ".join(rng.choice(words, rng.integers(3, 12))), "a": " ".join(rng.choice(words, rng.integers(2, 30)))} for _ in range(2000)]
    nodes = [agg(i=i, name=f"agg{i}") for i in range(20)]
    nodes += [top(i=i, parents={"a": agg(i=i % 20), "b": agg(i=(i + 1) % 20)}, name=f"top{i}") for i in range(40)]
    with tempfile.TemporaryDirectory() as cache:
        t = time.perf_counter()
        cold = run(nodes, {"model": ToyModel(), "data": Rows(lambda: rows)}, cache_dir=cache)
        t_cold = time.perf_counter() - t
        model = ToyModel()
        t = time.perf_counter()
        warm = run(nodes, {"model": model, "data": Rows(lambda: rows)}, cache_dir=cache)
        t_warm = time.perf_counter() - t
    assert cold.ok and warm.count("computed") == 0 and model.loads == 0
    print(f"nodes: {len(cold.records)}  requests: {cold.executor['requests']}")
    print(f"cold: {t_cold:.3f} s   warm: {t_warm:.3f} s   warm/cold: {100 * t_warm / t_cold:.1f} %  (goal <= 5 %)")


if __name__ == "__main__":
    main()
