"""Shared question prefixes: a context several token-statistics requests share is forwarded once.

The tolerance (docs/performance.md, "Shared question prefixes"): per-token log-probs, mu and
var within 2e-5 absolute of the plain path (every sequence forwarded whole), argmax equal;
what the metrics compute from them within the golden files' 2e-5 relative / 1e-6 absolute.
Measured here: 3.8e-6 on the trained fixture; 3.2e-5 on SmolLM2-135M's 30 layers
(docs/performance.md), which the real-model tier checks with its own bound.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evaldag.engine.adapters.base import PromptTemplate
from evaldag.engine.batching import Budget, pack, pack_by_prefix
from evaldag.engine.executor import Executor
from evaldag.engine.requests import TokenStats

from ..perf.drift import numbers
from ..conftest_models import TINY_LLAMA, TOFU, one_thread, resource, tofu_rows

torch = pytest.importorskip("torch")
one_thread()
LOGPROB_ATOL = 2e-5  # docs/performance.md: the stated drift of shared prefixes
GOLDEN_RTOL, GOLDEN_ATOL = 2e-5, 1e-6  # tests/fidelity/test_golden_outputs.py


# ------------------------------------------------------------------------- packing (pure)

def _item(prefix: tuple, rest: int, name: str):
    return (name, prefix, rest)


def _len(x) -> int:
    return len(x[1]) + x[2]


def test_pack_by_prefix_keeps_each_prefix_together_under_the_budget():
    a, b = (1,) * 20, (2,) * 10
    items = [_item(a, 12, f"a{i}") for i in range(7)] + [_item(b, 3, f"b{i}") for i in range(7)] + \
        [_item((3,) * 8, 4, "solo1"), _item((4,) * 30, 2, "solo2")]
    budget = Budget(tokens=80, max_batch=32)
    batches = pack_by_prefix(items, _len, lambda x: x[1], budget)
    assert sorted(x[0] for bt in batches for x in bt) == sorted(x[0] for x in items)  # each item once
    for bt in batches:
        prefixes = {x[1] for x in bt}
        shared = [x for x in bt if x[0][0] in "ab"]
        if shared:  # a shared batch: prefixes once + every row's rest, padded
            assert len(prefixes) * max(len(p) for p in prefixes) + len(bt) * max(x[2] for x in bt) <= budget.tokens
            assert not [x for x in bt if x[0].startswith("solo")]
    where = {x[0]: i for i, bt in enumerate(batches) for x in bt}
    assert len({where[f"b{i}"] for i in range(7)}) == 1  # 10 + 7 x 3 = 31 tokens: one batch
    assert len({where[f"a{i}"] for i in range(7)}) == 2  # 20 + 7 x 12 = 104 tokens: cut in two (5 + 2 rows)
    assert where["b0"] not in {where[f"a{i}"] for i in range(7)}  # with b's: 2 x 20 + 9 x 12 > 80
    # the items no other shares are packed exactly as pack() packs them
    alone = [x for x in items if x[0].startswith("solo")]
    assert [bt for bt in batches if bt[0][0].startswith("solo")] == pack(alone, _len, budget)


def test_pack_by_prefix_respects_max_batch_and_splits_a_large_group():
    items = [_item((9,) * 4, 2, f"r{i}") for i in range(10)]
    batches = pack_by_prefix(items, _len, lambda x: x[1], Budget(tokens=10_000, max_batch=4))
    assert [len(b) for b in batches] == [4, 4, 2]


# ------------------------------------------------------------------------- numbers

def _truth_ratio_requests(res, template=PromptTemplate.plain()):
    enc = res.encoder()
    out = []
    for r in tofu_rows("forget10_perturbed"):
        for ans in [r["answer"], r["paraphrased_answer"], *r["perturbed_answer"]]:
            e = enc.encode_qa(r["question"], ans, template)
            out.append(TokenStats(tuple(e.context_ids), tuple(e.continuation_ids)))
    return out


def _served(ex: Executor) -> dict:
    (account,) = [kinds["token_stats"] for kinds in ex.stats.served.values()]
    return account


@pytest.mark.parametrize("which", ["fixture", "gpt2"])
def test_shared_contexts_equal_the_plain_path_within_the_stated_tolerance(which):
    from evaldag.engine.adapters.hf import HFModel

    res = HFModel(str(TINY_LLAMA / "target")) if which == "fixture" else resource("gpt2")
    reqs = _truth_ratio_requests(res)
    if which == "gpt2":  # the pad id inside a context: reference masking hides it on both paths
        pad = res.encoder().tokenizer.pad_token_id
        reqs += [TokenStats(r.context_ids[:3] + (pad,) + r.context_ids[3:], r.continuation_ids) for r in reqs[:14]]
    plain_ex, shared_ex = Executor(prefix_sharing=False), Executor()
    plain = plain_ex.serve([(res, r) for r in reqs])
    shared = shared_ex.serve([(res, r) for r in reqs])
    account = _served(shared_ex)
    assert _served(plain_ex) == {"prefix_sharing": "off"}
    assert account["prefix_sharing"] == "on" and account["rows"] >= len(reqs) // 2
    assert account["contexts"] * 4 < account["rows"]  # a question's answers share one context
    assert account["tokens_forwarded"] < 0.7 * account["tokens_asked"]
    worst = 0.0
    for p, s in zip(plain, shared):
        worst = max(worst, float(np.abs(p.logprob - s.logprob).max()))
        np.testing.assert_allclose(s.logprob, p.logprob, atol=LOGPROB_ATOL, rtol=0)
        np.testing.assert_allclose(s.mu, p.mu, atol=LOGPROB_ATOL, rtol=0)
        np.testing.assert_allclose(s.var, p.var, atol=LOGPROB_ATOL, rtol=1e-4)
        np.testing.assert_array_equal(s.argmax, p.argmax)
    assert worst > 0  # the shared path did run: other shapes, other rounding


def test_a_head_every_context_shares_is_forwarded_once_within_the_stated_tolerance(monkeypatch):
    """A system prompt before every question (a chat template's): its keys and values are computed
    once for the whole batch and repeated for each context; the numbers stay within the shared
    path's tolerance of the plain path, and the batch forwards the head once."""
    from evaldag.engine.adapters.hf import HFModel, hf_heads

    res = HFModel(str(TINY_LLAMA / "target"))
    system = tuple(res.encoder().tokenizer("You are a careful assistant. Answer the question about the author.",
                                           add_special_tokens=False).input_ids)
    assert len(system) >= hf_heads.MIN_SHARED_HEAD
    reqs = [TokenStats(system + r.context_ids, r.continuation_ids) for r in _truth_ratio_requests(res)]
    plain = Executor(prefix_sharing=False).serve([(res, r) for r in reqs])
    monkeypatch.setattr(hf_heads, "MIN_SHARED_HEAD", 10**9)  # contexts shared, each forwarded whole
    whole_ex = Executor()
    whole = whole_ex.serve([(res, r) for r in reqs])
    monkeypatch.undo()
    head_ex, rows_before = Executor(), res.load().prefixes.counts["rows"]  # the adapter counts over its life
    head = head_ex.serve([(res, r) for r in reqs])
    saved = whole_ex.stats.by_kind["token_stats"].tokens_real - head_ex.stats.by_kind["token_stats"].tokens_real
    contexts, batches = len({r.context_ids for r in reqs}), head_ex.stats.by_kind["token_stats"].batches
    assert contexts == 80 and saved >= (contexts - batches) * len(system)  # once per batch, not once per context
    assert res.load().prefixes.counts["rows"] - rows_before == len(reqs)  # a lone context shares the head too
    worst = 0.0
    for p, w, h in zip(plain, whole, head):
        worst = max(worst, float(np.abs(w.logprob - h.logprob).max()))
        np.testing.assert_allclose(h.logprob, p.logprob, atol=LOGPROB_ATOL, rtol=0)
        np.testing.assert_allclose(h.mu, p.mu, atol=LOGPROB_ATOL, rtol=0)
        np.testing.assert_array_equal(h.argmax, p.argmax)
    assert worst > 0  # the head really was forwarded apart: other shapes, other rounding


def test_shared_head_leaves_every_sequence_a_token_of_its_own():
    from evaldag.engine.adapters.hf import hf_heads

    head = tuple(range(10, 20))
    assert hf_heads.shared_head([head + (1, 2), head + (3,), head + (1, 5, 6)]) == 10
    assert hf_heads.shared_head([head + (1,), head]) == 9  # the second keeps its last id
    assert hf_heads.shared_head([head[:7] + (1,), head[:7] + (2,)]) == 0  # under MIN_SHARED_HEAD
    assert hf_heads.shared_head([head + (1,)]) == 0  # one sequence: nothing to share
    ids, real = hf_heads.head_layout([head + (1, 2), head + (3,)], 10, pad=0)
    assert ids.tolist() == [list(head) + [1, 2], list(head) + [0, 3]]
    assert real.tolist() == [[1] * 12, [1] * 10 + [0, 1]]


def test_answers_of_very_different_lengths_go_through_in_groups():
    """answer_groups: padded tokens plus ANSWER_GROUP_TOKENS per extra forward, minimised."""
    from evaldag.engine.adapters.hf import hf_prefix

    assert hf_prefix.ANSWER_GROUP_TOKENS == 32
    assert hf_prefix.answer_groups([20] * 10 + [5] * 10) == [list(range(10)), list(range(10, 20))]  # saves 150 > 32
    assert hf_prefix.answer_groups([7, 9, 8, 9]) == [[1, 3, 2, 0]]  # 4 tokens of padding: one forward
    got = hf_prefix.answer_groups([3, 30, 12, 29, 11, 4, 30, 2])
    assert sorted(i for g in got for i in g) == list(range(8)) and got[0][:2] == [1, 6]
    assert all(len({i for i in g}) == len(g) for g in got) and len(got) >= 2


def test_deterministic_shares_nothing():
    res = resource("llama")
    reqs = _truth_ratio_requests(res)[:14]
    ex = Executor(deterministic=True)
    ex.serve([(res, r) for r in reqs])
    assert _served(ex) == {"prefix_sharing": "off"}


# ------------------------------------------------------------------------- the CLI and run.json

def _run(tmp, name, *extra):
    from evaldag.engine import cli

    out = tmp / name
    argv = ["run", "tofu", "--quiet", "--model", str(TINY_LLAMA / "target"), "--data", str(TOFU),
            "--metrics", "forget_Q_A_Prob,forget_truth_ratio,forget_Q_A_PARA_Prob,mia_min_k_plus_plus",
            "--out", str(out), "--cache-dir", str(tmp / f"cache-{name}"), *extra]
    assert cli.main(argv) == 0
    return json.loads((out / "TOFU_EVAL.json").read_text()), json.loads((out / "run.json").read_text())


def test_on_by_default_off_by_option_and_run_json_says_which(tmp_path):
    on, on_run = _run(tmp_path, "on")
    off, off_run = _run(tmp_path, "off", "--prefix-sharing", "off")
    _, det_run = _run(tmp_path, "det", "--deterministic")
    assert [r["provenance"]["execution"]["prefix_sharing"] for r in (on_run, off_run, det_run)] == [True, False, False]
    ways = [[k["token_stats"]["prefix_sharing"] for k in r["executor"]["served"].values()] for r in (on_run, off_run, det_run)]
    assert ways == [["on"], ["off"], ["off"]]
    (account,) = on_run["executor"]["served"].values()
    assert account["token_stats"]["rows"] > 0 and account["token_stats"]["contexts"] < account["token_stats"]["rows"]
    a, b = numbers(on, (float,)), numbers(off, (float,))
    assert a.keys() == b.keys() and len(a) > 100
    far = [(k, a[k], b[k]) for k in a if not math.isclose(a[k], b[k], rel_tol=GOLDEN_RTOL, abs_tol=GOLDEN_ATOL)]
    assert not far, far[:5]


def test_a_batch_with_an_empty_continuation_is_served_plainly():
    res = resource("llama")
    reqs = _truth_ratio_requests(res)[:7]
    reqs.append(TokenStats(reqs[0].context_ids, ()))
    before = res.load().served("token_stats") or {"rows": 0}
    ex = Executor()
    shared = ex.serve([(res, r) for r in reqs])
    plain = Executor(prefix_sharing=False).serve([(res, r) for r in reqs])
    assert len(shared[-1].logprob) == 0
    assert _served(ex)["rows"] == before.get("rows", 0)  # packed together, served by the plain path
    for p, s in zip(plain, shared):
        np.testing.assert_allclose(s.logprob, p.logprob, atol=LOGPROB_ATOL, rtol=0)
