"""GradNorm for many rows in one backward (ghost norms, or vmap) gives the norms of one
backward per row; each ghost rule equals the per-parameter norms of a hand loop."""

from __future__ import annotations

from collections import Counter

import pytest

from evaldag.metrics.unlearning import grad_backend, hf_ghost, hf_grad
from evaldag.engine.adapters.base import PromptTemplate
from evaldag.engine.adapters.hf import HFAdapter, HFModel
from evaldag.engine.executor import Executor
from evaldag.metrics.unlearning.grad_backend import GradNorm

from ..conftest_models import TINY_LLAMA, model, one_thread, tofu_rows, tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
one_thread()


def grad_requests(res, n: int = 60) -> list[GradNorm]:
    enc, plain = res.encoder(), PromptTemplate.plain()
    rows = (tofu_rows("forget10_perturbed") + tofu_rows("holdout10"))[:n]
    reqs = [GradNorm(e.context_ids, e.continuation_ids) for e in (enc.encode_qa(r["question"], r["answer"], plain) for r in rows)]
    reqs.append(GradNorm(reqs[0].context_ids, reqs[0].continuation_ids, p=1.0, exclude_last=False))
    reqs.append(GradNorm(reqs[1].context_ids, reqs[1].continuation_ids[:1]))  # nothing scored: NaN
    return reqs


def one_row_values(adapter: HFAdapter, reqs: list[GradNorm]) -> list[float]:
    single = HFAdapter(adapter.model, adapter.tokenizer)
    grad_backend.configure(single, rows=1)  # open-unlearning's one backward per row
    return [r.value for r in single.run_batch(reqs)]


def spy(monkeypatch, name: str) -> list[int]:
    calls: list[int] = []
    inner = getattr(hf_grad, name)
    monkeypatch.setattr(hf_grad, name, lambda m, rs, *a: calls.append(len(rs)) or inner(m, rs, *a))
    return calls


@pytest.mark.parametrize("mode", ["ghost", "vmap"])
def test_batched_grad_norms_equal_one_row_backward_passes(monkeypatch, mode):
    res = HFModel(str(TINY_LLAMA / "target"))
    adapter, reqs = res.load(), grad_requests(res)
    assert grad_backend.runner(adapter).mode == "auto" and grad_backend.runner(adapter).way() == "ghost"  # the default on this CPU model
    if mode == "vmap":
        assert max(Counter(r.length() for r in reqs).values()) >= 5  # rows of one length really share a backward
    calls = spy(monkeypatch, "ghost_norms" if mode == "ghost" else "many_rows")
    grad_backend.configure(adapter, mode, 4)
    batched = [r.value for r in adapter.run_batch(reqs)]
    assert max(calls) == 4 and sum(c for c in calls if c > 1) >= len(reqs) // 2
    n_calls = len(calls)
    single = one_row_values(adapter, reqs)
    assert len(calls) == n_calls  # grad_rows = 1 never batches
    assert not adapter.model.training and all(p.grad is None for p in adapter.model.parameters())
    assert batched[:-1] == pytest.approx(single[:-1], rel=1e-5)
    assert batched[-1] != batched[-1] and single[-1] != single[-1]  # NaN
    assert len({round(b, 6) for b in batched}) > len(reqs) // 2  # values differ per row


def test_the_executor_hands_grad_norm_many_rows_and_values_do_not_change():
    res = HFModel(str(TINY_LLAMA / "target"))
    reqs = grad_requests(res, 30)
    ex = Executor()
    got = ex.serve([(res, r) for r in reqs])
    assert ex.stats.by_kind["grad_norm"].batches < len(reqs) // 4
    assert [g.value for g in got[:-1]] == pytest.approx(one_row_values(res.load(), reqs[:-1]), rel=1e-5)


def _tiny(arch: str):
    cfg = {"llama": transformers.LlamaConfig(num_key_value_heads=2),
           "qwen2": transformers.Qwen2Config(num_key_value_heads=2),  # biased q/k/v projections
           "gpt_neox": transformers.GPTNeoXConfig(),  # LayerNorm with bias, its own embed_out
           "gpt2": transformers.GPT2Config(n_inner=48, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)}[arch]  # Conv1D, wpe
    for k, v in dict(vocab_size=300, hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=48,
                     max_position_embeddings=128, initializer_range=0.3, tie_word_embeddings=False).items():
        setattr(cfg, k, v)
    torch.manual_seed(3)
    return transformers.AutoModelForCausalLM.from_config(cfg).float()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt_neox", "gpt2"])
def test_each_ghost_rule_equals_the_norms_of_a_hand_loop(arch):
    """Per row and per parameter, against loss.backward() on that row alone; rows repeat
    token ids (the embedding rule adds them up) and one is longer than in_features of the
    attention projections (T^2 > in * out: the direct branch of the linear rule)."""
    m = _tiny(arch).train()
    assert hf_ghost.supported(m) is None
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 300, (n,), generator=g).tolist() for n in (9, 14, 40)]
    seqs[0][5:8] = [7, 7, 7]
    spans = [(3, 5), (4, 9), (10, 29)]
    got = hf_ghost.ghost_norms(m, seqs, spans, masked_id=None)
    assert not m.training or all(p.requires_grad for p in m.parameters())
    for b, (s, (start, n)) in enumerate(zip(seqs, spans)):
        m.zero_grad()
        ids = torch.tensor([s])
        logp = torch.log_softmax(m(input_ids=ids).logits[0, :-1].float(), -1)
        (-logp[start - 1 : start - 1 + n].gather(1, ids[0, start : start + n, None]).mean()).backward()
        want = {k: p.grad.norm().item() for k, p in m.named_parameters() if p.grad is not None}
        assert set(got) == set(want)
        for k, v in want.items():
            assert got[k][b].item() == pytest.approx(v, rel=1e-4, abs=1e-7), (arch, k, b)


def test_which_way_serves_which_model(monkeypatch):
    llama = model("llama")
    assert hf_grad.GradNormRunner(llama, None).way() == "ghost"
    assert hf_grad.GradNormRunner(llama, None, rows=1).way() == "one_row"
    assert hf_grad.GradNormRunner(llama, None, mode="vmap").way() == "vmap"
    llama.config.attention_dropout = 0.1
    try:  # train-mode dropout draws random numbers per row: open-unlearning's batch of one
        assert not hf_grad.dropout_free(llama) and hf_grad.GradNormRunner(llama, None).way() == "one_row"
    finally:
        llama.config.attention_dropout = 0.0
    gpt2 = model("gpt2")  # wte is lm_head: a tied weight needs cross terms the rules do not have
    assert hf_ghost.supported(gpt2) == "parameter lm_head.weight is shared with transformer.wte.weight"
    assert hf_grad.GradNormRunner(gpt2, None).way() == "one_row"  # CPU: no vmap
    with pytest.warns(UserWarning, match="ghost norms cannot serve"):
        assert hf_grad.GradNormRunner(gpt2, None, mode="ghost").way() == "one_row"


@pytest.mark.parametrize("first_p", [2.0, 1.0])  # p = 1 first: the check waits for a row ghost norms serve
def test_a_ghost_rule_that_disagrees_on_the_first_row_is_dropped(monkeypatch, first_p):
    res = HFModel(str(TINY_LLAMA / "target"))
    reqs = grad_requests(res, 12)[:-2]
    reqs[0] = GradNorm(reqs[0].context_ids, reqs[0].continuation_ids, p=first_p)
    adapter = HFAdapter(res.load().model, res.load().tokenizer)
    good = hf_grad.ghost_norms
    monkeypatch.setattr(hf_grad, "ghost_norms", lambda *a: {k: v * 1.01 for k, v in good(*a).items()})
    with pytest.warns(UserWarning, match="disagree"):
        got = [r.value for r in adapter.run_batch(reqs)]
    assert grad_backend.runner(adapter).way() == "one_row"
    assert got == one_row_values(adapter, reqs)  # bit-identical: every row took one backward
