"""Every backend's answer types through the executor's one check (engine/answers.py), seeded fuzz.

A backend of the test's own hands the executor batches in which one answer is damaged at
random (a non-finite or positive log-prob, a length other than asked, ``None``, a wrong type,
a negative or surplus token id, a wrong hidden-state shape): the executor must refuse the
batch with one line naming the backend and store nothing of it; the undamaged answer of the
same request is served and stored. Whole non-finite distributions (a NaN weight's logits) are
admitted and noted; statistics a backend does not declare become "not available" (None).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from evaldag.engine.answers import SLACK, BadAnswer, Backend
from evaldag.engine.backend import Capabilities, Identity, ModelAdapter, ModelResource
from evaldag.engine.cache import Cache
from evaldag.engine.executor import Executor
from evaldag.engine.requests import (Generate, GenerateResult, GenerateText, GenerationSettings, HiddenStates,
                                     HiddenStatesResult, TokenStats, TokenStatsResult, nonfinite_output)

ALL = Capabilities(frozenset({"token_stats", "generate", "generate_text", "hidden_states"}),
                   frozenset({"logprob", "argmax", "mu", "var"}))


def good(req, rng: random.Random):
    """A possible answer to ``req``."""
    if isinstance(req, TokenStats):
        n = len(req.continuation_ids)
        lp = -np.asarray([rng.uniform(0, 20) for _ in range(n)], np.float32)
        mu = -np.asarray([rng.uniform(0, 8) for _ in range(n)], np.float32)
        return TokenStatsResult(lp, np.asarray([rng.randrange(1000) for _ in range(n)], np.int32), mu,
                                np.asarray([rng.uniform(0, 4) for _ in range(n)], np.float32))
    if isinstance(req, Generate):
        k = rng.randint(0, req.settings.max_new_tokens)
        return GenerateResult(np.asarray([rng.randrange(1000) for _ in range(k)], np.int32), "x" * k)
    if isinstance(req, GenerateText):
        return GenerateResult(np.zeros(0, np.int32), "an answer")
    return HiddenStatesResult(np.zeros((len(req.layers), len(req.ids), 8), np.float32))


def damaged(req, res, rng: random.Random) -> tuple[object, str]:
    """``res`` made impossible in one random way, and a word the refusal must hold."""
    if rng.random() < 0.08:
        return None, "null"
    if isinstance(req, TokenStats):
        n = len(req.continuation_ids)
        i = rng.randrange(n)
        how = rng.choice(["nan", "inf", "-inf", "positive", "long", "short", "argmax", "mu", "var", "type", "ints"])
        lp = res.logprob.copy()
        if how in ("nan", "inf", "-inf", "positive"):
            lp[i] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "positive": rng.choice([3.0, 1e-3, 0.5])}[how]
            return TokenStatsResult(lp, res.argmax, res.mu, res.var), "log-prob"
        if how in ("long", "short"):
            m = n + 1 if how == "long" else n - 1
            return TokenStatsResult(np.zeros(m, np.float32) - 1, np.zeros(m, np.int32), None, None), "shape"
        if how == "argmax":
            am = res.argmax.copy()
            am[i] = rng.choice([-2, -1000])
            return TokenStatsResult(res.logprob, am, res.mu, res.var), "greedy token"
        if how == "mu":
            mu = res.mu.copy()
            mu[i] = rng.choice([0.5, 2.0])
            return TokenStatsResult(res.logprob, res.argmax, mu, res.var), "mean of log p"
        if how == "var":
            var = res.var.copy()
            var[i] = -rng.choice([0.5, 2.0])
            return TokenStatsResult(res.logprob, res.argmax, res.mu, var), "variance of log p"
        if how == "ints":
            return TokenStatsResult(lp.astype(np.int64), res.argmax, res.mu, res.var), "dtype"
        return GenerateResult(np.zeros(0, np.int32), ""), "GenerateResult"
    if isinstance(req, (Generate, GenerateText)):
        how = rng.choice(["text", "negative", "long"] if isinstance(req, Generate) else ["text", "negative"])
        if how == "text":
            return GenerateResult(res.token_ids, None), "text is null"
        if how == "negative":
            return GenerateResult(np.asarray([5, -3], np.int32), "ab"), "token id -3"
        k = req.settings.max_new_tokens + rng.randint(1, 5)
        return GenerateResult(np.ones(k, np.int32), "x"), f"{k} new tokens"
    bad = np.zeros((len(req.layers) + 1, len(req.ids), 8), np.float32)
    return HiddenStatesResult(bad), "hidden states have shape"


def request(rng: random.Random, kind: str):
    ids = tuple(rng.randrange(1, 1000) for _ in range(rng.randint(1, 6)))
    if kind == "token_stats":
        return TokenStats(ids, tuple(rng.randrange(1000) for _ in range(rng.randint(1, 6))))
    if kind == "generate":
        return Generate(ids, GenerationSettings(max_new_tokens=rng.randint(1, 8)))
    if kind == "generate_text":
        return GenerateText(" ".join(map(str, ids)))
    return HiddenStates(ids, (0, -1))


class Plugin(ModelResource):
    """A third party's backend: answers what ``answers`` holds for each request."""

    backend = "fuzz"

    def __init__(self, caps: Capabilities = ALL):
        self.caps, self.answers, self.forwarded = caps, {}, 0

    def fingerprint(self) -> str:
        return "fuzz-model"

    def capabilities(self) -> Capabilities:
        return self.caps

    def identity(self) -> Identity:
        return Identity("fuzz")

    def load(self) -> ModelAdapter:
        outer = self

        class A(ModelAdapter):
            def capabilities(self):
                return outer.caps

            def run_batch(self, requests):
                outer.forwarded += len(requests)
                return [outer.answers[r.key()] for r in requests]

        return A()


@pytest.mark.parametrize("seed", range(4))
def test_one_damaged_answer_refuses_its_batch_and_nothing_of_it_is_stored(seed, tmp_path):
    rng = random.Random(seed)
    cache = Cache(tmp_path / "c")
    model = Plugin()
    for trial in range(60):
        kind = rng.choice(["token_stats", "generate", "generate_text", "hidden_states"])
        reqs = list({r.key(): r for r in (request(rng, kind) for _ in range(rng.randint(1, 5)))}.values())
        answers = {r.key(): good(r, rng) for r in reqs}
        victim = rng.choice(reqs)
        bad, word = damaged(victim, answers[victim.key()], rng)
        model.answers = {**answers, victim.key(): bad}
        before = cache.requests.count()
        with pytest.raises(BadAnswer) as e:
            Executor(cache=cache.requests).serve([(model, r) for r in reqs])
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"fuzz gave an impossible {kind} answer") and word in msg, (trial, msg)
        assert cache.requests.count() == before  # nothing of the batch
        model.answers = answers  # the backend fixed: the same requests are asked again, served, stored
        got = Executor(cache=cache.requests).serve([(model, r) for r in reqs])
        assert len(got) == len(reqs) and cache.requests.count() == before + len(reqs)


def test_a_nonfinite_distribution_is_admitted_and_noted_a_lone_nan_is_not():
    b = Backend(Plugin(), ALL.token_fields)
    req = TokenStats((1,), (2, 3))
    nan = np.full(2, np.nan, np.float32)
    whole = TokenStatsResult(nan, np.zeros(2, np.int32), nan.copy(), nan.copy())  # a NaN weight: every logit NaN
    assert b.admit("token_stats", [req], [whole]) == [whole] and nonfinite_output(whole)
    lone = TokenStatsResult(np.array([-1.0, np.nan], np.float32), np.zeros(2, np.int32), np.full(2, -1.0, np.float32),
                            np.ones(2, np.float32))
    with pytest.raises(BadAnswer, match="log-prob NaN at token 1"):
        b.admit("token_stats", [req], [lone])
    edge = TokenStatsResult(np.array([SLACK, 0.0], np.float32), np.zeros(2, np.int32), None, None)
    assert b.admit("token_stats", [req], [edge]) == [edge]  # within the stated rounding slack


def test_statistics_a_backend_does_not_declare_are_not_available_never_nan(tmp_path):
    server = Backend(Plugin(), frozenset({"logprob", "argmax"}))
    req = TokenStats((1,), (2, 3))
    nan = np.full(2, np.nan, np.float32)
    got = server.admit("token_stats", [req], [TokenStatsResult(np.full(2, -1.0, np.float32), np.zeros(2, np.int32),
                                                                nan, nan.copy())])[0]
    assert got.mu is None and got.var is None and not nonfinite_output(got)
    assert set(got.to_arrays()) == {"logprob", "argmax"}
    with pytest.raises(BadAnswer):  # and a NaN log-prob cannot hide behind a placeholder distribution
        server.admit("token_stats", [req], [TokenStatsResult(nan.copy(), np.zeros(2, np.int32), nan, nan.copy())])
    stored = Cache(tmp_path / "c").requests
    stored.put_many("m", [(req.key(), "token_stats", got)])
    back = stored.get_many("m", [req.key()])[req.key()]
    assert back.mu is None and back.logprob.tolist() == [-1.0, -1.0]


def test_a_servers_json_numbers_and_ranks_seeded_fuzz():
    """What ``answers.number``/``rank`` take from a server's JSON: numbers (NaN and infinities are
    judged later, by the executor); ranks integers >= 1; anything else one line, never a TypeError."""
    from evaldag.engine.answers import number, rank

    rng = random.Random(7)
    pool = [None, "x", "1", True, False, [], {}, 0, -1, 1, 2, 7.0, 1.5, 0.5, -0.0, float("nan"), float("inf"),
            float("-inf"), 3.0, -12.25, 10**30]
    for _ in range(400):
        x = rng.choice(pool)
        numeric = isinstance(x, (int, float)) and not isinstance(x, bool)
        if numeric:
            assert number(x, "w") == float(x) or x != x
        else:
            with pytest.raises(BadAnswer, match="^w is .*, not a number$"):
                number(x, "w")
        if numeric and math.isfinite(x) and x >= 1 and int(x) == x:
            assert rank(x, "w") == int(x)
        else:
            with pytest.raises(BadAnswer, match="a rank is an integer >= 1"):
                rank(x, "w")
