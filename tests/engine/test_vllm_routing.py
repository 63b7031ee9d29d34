"""A node computed by a backend without full-vocabulary statistics (``vllm:``, ``openai:``) is
never reused where ``--fallback`` serves the same scorer vertex with them.

Found with ``vllm:``: ``run tofu --model vllm:X --metrics forget_Q_A_Prob`` stores the forget
``qa_stats`` node (mu and var NaN: vLLM gives no full distribution); ``run tofu --model vllm:X
--fallback hf:X --metrics mia_min_k_plus_plus`` then has the planner send that vertex to
``hf:``, but the routed resource's fingerprint is the primary's, so the vertex kept its
fingerprint and the NaN node came back from the cache (Min-K%++ failed on NaN AUC input).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from evaldag.engine import Result, metric, run
from evaldag.engine.adapters.toy import ToyAdapter, ToyModel
from evaldag.engine.backend import Capabilities, Identity, Routed
from evaldag.engine.requests import Request, TokenStats, TokenStatsResult


class _NoVocab(ToyModel):
    """The toy's weights, served like vLLM: log-prob and argmax; its mu and var NaN placeholders
    are taken as not available (None) by the executor."""

    backend = "novocab"

    def capabilities(self) -> Capabilities:
        return Capabilities({"token_stats"}, {"logprob", "argmax"})

    def identity(self) -> Identity:
        return Identity("novocab", "cpu", (("kind", "no-vocab"),))

    def label(self) -> str:
        return "novocab:0"

    def load(self) -> ToyAdapter:
        inner = super().load()

        class _Adapter(ToyAdapter):
            def __init__(self) -> None:
                self.__dict__.update(inner.__dict__)

            def run_batch(self, requests: Sequence[Request]) -> list:
                out = inner.run_batch(requests)
                nan = lambda r: np.full(len(r.logprob), math.nan, dtype=np.float32)  # noqa: E731
                return [TokenStatsResult(r.logprob, r.argmax, nan(r), nan(r)) for r in out]

        return _Adapter()


@metric("routing_stats", version="1", needs=("model",), register=False, requests={"model": {"token_stats": ("logprob",)}})
def _stats(model):
    got = yield [TokenStats((1, 2, 3), (4, 5, 6)), TokenStats((1, 7), (8, 9))]
    return {"lp": [g.logprob.tolist() for g in got], "mu": [None if g.mu is None else g.mu.tolist() for g in got]}


@metric("routing_lp", version="1", parents={"s": _stats()}, register=False)
def _lp(s):
    return Result(float(np.mean([np.mean(x) for x in s["lp"]])))


@metric("routing_mu", version="1", parents={"s": _stats()}, register=False, uses={"token_stats": ("mu", "var")})
def _mu(s):
    return Result(float(np.mean([np.mean(x) for x in s["mu"]])))


def test_a_routed_vertex_never_reuses_the_primarys_node(tmp_path):
    first = run([_lp(name="lp")], {"model": _NoVocab()}, cache_dir=tmp_path / "c")
    assert first.ok and math.isfinite(first.value("lp").agg_value)
    routed = run([_lp(name="lp"), _mu(name="mu")], {"model": Routed(_NoVocab(), ToyModel())}, cache_dir=tmp_path / "c")
    assert routed.ok, [(r.name, r.reason) for r in routed.failures()]
    assert math.isfinite(routed.value("mu").agg_value)  # the fallback's full statistics, not the cached NaNs
    want = run([_mu(name="mu")], {"model": ToyModel()}, cache_dir=tmp_path / "toy").value("mu").agg_value
    assert routed.value("mu").agg_value == want
    again = run([_lp(name="lp")], {"model": _NoVocab()}, cache_dir=tmp_path / "c")  # the primary's own node is still warm
    assert [r.status for r in again.records.values()] == ["cached", "cached"]
