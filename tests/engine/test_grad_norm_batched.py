"""GradNorm for many rows in one vmapped backward gives the norms of one backward per row."""

from __future__ import annotations

from collections import Counter

import pytest

from evaldag.engine.adapters import hf_grad
from evaldag.engine.adapters.base import PromptTemplate
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.executor import Executor
from evaldag.engine.requests import GradNorm

from ..conftest_models import TINY_LLAMA, model, one_thread, tofu_rows, tokenizer

torch = pytest.importorskip("torch")
one_thread()


def grad_requests(res, n: int = 60) -> list[GradNorm]:
    enc, plain = res.encoder(), PromptTemplate.plain()
    rows = (tofu_rows("forget10_perturbed") + tofu_rows("holdout10"))[:n]
    reqs = [GradNorm(e.context_ids, e.continuation_ids) for e in (enc.encode_qa(r["question"], r["answer"], plain) for r in rows)]
    reqs.append(GradNorm(reqs[0].context_ids, reqs[0].continuation_ids, p=1.0, exclude_last=False))
    reqs.append(GradNorm(reqs[1].context_ids, reqs[1].continuation_ids[:1]))  # nothing scored: NaN
    return reqs


def test_batched_grad_norms_equal_one_row_backward_passes(monkeypatch):
    res = HFModel(str(TINY_LLAMA / "target"))
    adapter, reqs = res.load(), grad_requests(res)
    lengths = Counter(r.length() for r in reqs)
    assert max(lengths.values()) >= 5  # rows really share a backward pass
    calls = []
    many = hf_grad.many_rows
    monkeypatch.setattr(hf_grad, "many_rows", lambda m, rs, *a: calls.append(len(rs)) or many(m, rs, *a))
    adapter.grad_rows = 4
    batched = adapter.run_batch(reqs)
    assert sum(calls) >= len(reqs) // 2 and max(calls) == 4
    n_calls = len(calls)
    single = res.load().__class__(adapter.model, adapter.tokenizer)  # a fresh adapter, one row per backward
    single.grad_rows = 1
    single = single.run_batch(reqs)
    assert len(calls) == n_calls
    assert not adapter.model.training and all(p.grad is None for p in adapter.model.parameters())
    for b, s in zip(batched[:-1], single[:-1]):
        assert b.value == pytest.approx(s.value, rel=1e-5)
    assert batched[-1].value != batched[-1].value and single[-1].value != single[-1].value  # NaN
    assert len({round(b.value, 6) for b in batched}) > len(reqs) // 2  # values differ per row


def test_the_executor_hands_grad_norm_many_rows_and_values_do_not_change():
    res = HFModel(str(TINY_LLAMA / "target"))
    reqs = grad_requests(res, 30)
    assert res.load().grad_rows == 1  # CPU default: open-unlearning's one backward per row
    res.load().grad_rows = 16
    ex = Executor()
    got = ex.serve([(res, r) for r in reqs])
    assert ex.stats.by_kind["grad_norm"].batches < len(reqs) // 4
    one = type(res.load())(res.load().model, res.load().tokenizer)
    for g, s in zip(got[:-1], one.run_batch(reqs[:-1])):
        assert g.value == pytest.approx(s.value, rel=1e-5)


def test_a_model_with_dropout_keeps_one_backward_per_row():
    from evaldag.engine.adapters.hf import HFAdapter

    def batched(m) -> bool:
        a = HFAdapter(m, tokenizer())
        a.grad_rows = 16
        return a._grad_batched()

    m = model("llama")
    assert hf_grad.dropout_free(m) and batched(m)
    m.config.attention_dropout = 0.1
    try:
        assert not hf_grad.dropout_free(m) and not batched(m)
    finally:
        m.config.attention_dropout = 0.0
    gpt2 = model("gpt2")
    assert hf_grad.dropout_free(gpt2) == all(x.p == 0 for x in gpt2.modules() if isinstance(x, torch.nn.Dropout))
