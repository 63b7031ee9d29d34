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

from ..conftest_models import TINY_LLAMA, model, one_thread, resource, tofu_rows, tokenizer

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


def _tied_resource(arch: str) -> HFModel:
    """A tied model of ``arch`` sized for the tiny tokenizer (GPT-2's wte is its lm_head;
    Gemma 3 scales its lookup by sqrt(hidden))."""
    if arch == "gpt2":
        return resource("gpt2")
    tok = tokenizer()
    cfg = transformers.Gemma3TextConfig(num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=24)
    if arch == "llama":
        cfg = transformers.LlamaConfig(num_key_value_heads=2)
    for k, v in dict(vocab_size=len(tok), hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                     intermediate_size=96, max_position_embeddings=512, initializer_range=0.3,
                     tie_word_embeddings=True, pad_token_id=tok.pad_token_id).items():
        setattr(cfg, k, v)
    torch.manual_seed(5)
    return HFModel.from_pretrained_objects(transformers.AutoModelForCausalLM.from_config(cfg).float().eval(), tok,
                                           name=f"tiny-{arch}-tied")


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma3"])
def test_tied_embeddings_take_ghost_norms_equal_to_one_row_backward_passes(monkeypatch, arch):
    """Rows of many lengths, right-padded in batches of 8, rows holding the pad id (masked
    as open-unlearning's collator does: inside, first, last), one with p = 1 (served
    alone): every value as one backward per row gives it."""
    res = _tied_resource(arch)
    adapter, reqs = res.load(), grad_requests(res, 24)
    m = adapter.model
    assert m.get_input_embeddings().weight is m.get_output_embeddings().weight
    pad = adapter.masked_id
    reqs.append(GradNorm(reqs[2].context_ids, reqs[2].continuation_ids[:3] + (pad,) + reqs[2].continuation_ids[3:]))
    reqs.append(GradNorm((pad,) + reqs[3].context_ids, reqs[3].continuation_ids + (pad,)))
    calls = spy(monkeypatch, "ghost_norms")
    batched = [r.value for r in adapter.run_batch(reqs)]
    run = grad_backend.runner(adapter)
    assert run.way() == "ghost" and run.why_not_ghost is None
    # one backward: the first row (which parameters count) and p = 1; NaN: nothing scored
    assert max(calls) == 8 and sum(calls) == 1 + len(reqs) - 3  # 1: the first row's check
    single = one_row_values(adapter, reqs)
    nan = [i for i, v in enumerate(single) if v != v]
    assert nan == [len(reqs) - 3] and batched[-3] != batched[-3]
    assert [v for i, v in enumerate(batched) if i not in nan] == pytest.approx(
        [v for i, v in enumerate(single) if i not in nan], rel=2e-5)
    assert len({round(b, 6) for b in batched}) > len(reqs) // 2


def test_the_executor_hands_grad_norm_many_rows_and_values_do_not_change():
    res = HFModel(str(TINY_LLAMA / "target"))
    reqs = grad_requests(res, 30)
    ex = Executor()
    got = ex.serve([(res, r) for r in reqs])
    assert ex.stats.by_kind["grad_norm"].batches < len(reqs) // 4
    assert [g.value for g in got[:-1]] == pytest.approx(one_row_values(res.load(), reqs[:-1]), rel=1e-5)


def _tiny(arch: str):
    """A tiny model of ``arch`` ("_tied": input and output embeddings one weight; Gemma's are,
    and scale the lookup by sqrt(hidden)); pad_token_id 1 gives Llama/Gemma embeddings a
    padding_idx, whose row receives no gradient."""
    base, tied = arch.removesuffix("_tied"), arch.endswith("_tied") or arch.startswith("gemma")
    gemma = dict(num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8, sliding_window=16)
    cfg = {"llama": lambda: transformers.LlamaConfig(num_key_value_heads=2),
           "qwen2": lambda: transformers.Qwen2Config(num_key_value_heads=2),  # biased q/k/v projections
           "gpt_neox": lambda: transformers.GPTNeoXConfig(),  # LayerNorm with bias, its own embed_out
           "gpt2": lambda: transformers.GPT2Config(n_inner=48, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),  # Conv1D, wpe
           "gemma": lambda: transformers.GemmaConfig(**gemma),  # RMSNorm of (1 + weight), scaled embedding
           "gemma2": lambda: transformers.Gemma2Config(**gemma),  # + logit soft-capping, sliding windows
           "gemma3": lambda: transformers.Gemma3TextConfig(**gemma)}[base]()  # + q/k norms
    for k, v in dict(vocab_size=300, hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=48,
                     max_position_embeddings=128, initializer_range=0.3, tie_word_embeddings=tied, pad_token_id=1).items():
        setattr(cfg, k, v)
    torch.manual_seed(3)
    m = transformers.AutoModelForCausalLM.from_config(cfg).float()
    assert (m.get_input_embeddings().weight is m.get_output_embeddings().weight) == tied
    return m


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt_neox", "gpt2", "llama_tied", "gpt2_tied", "gemma", "gemma2", "gemma3"])
def test_each_ghost_rule_equals_the_norms_of_a_hand_loop(arch):
    """Per row and per parameter, against loss.backward() on that row alone; rows repeat
    token ids (the embedding rule adds them up), one holds the embedding's padding_idx, and
    one is longer than in_features of the attention projections (T^2 > in * out: the
    direct branch of the linear rule). A tied weight's norm has the cross term of its
    embedding and head gradients."""
    m = _tiny(arch).train()
    assert hf_ghost.supported(m) is None
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 300, (n,), generator=g).tolist() for n in (9, 14, 40)]
    seqs[0][5:8] = [7, 7, 7]
    seqs[1][2], seqs[1][6] = 1, 1  # the padding_idx (Llama, Gemma)
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


@pytest.mark.parametrize("arch", ["llama", "gpt2", "llama_tied", "gpt2_tied", "gemma3"])
def test_ghost_norms_with_the_head_on_scored_positions_only_equal_the_whole_head(arch):
    """With (base, head) given, the head sees each row's scored positions only (the batch's
    longest span, not the longest row), and every parameter's norm, the tied cross term's
    included, equals the whole-logits path's."""
    m = _tiny(arch).train()
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, 300, (n,), generator=g).tolist() for n in (12, 20, 31)]
    spans = [(8, 4), (5, 15), (20, 6)]
    whole = hf_ghost.ghost_norms(m, seqs, spans, masked_id=None)
    head = m.get_output_embeddings()
    seen: list[tuple] = []
    hook = head.register_forward_hook(lambda mod, inp, out: seen.append(tuple(inp[0].shape)))
    try:
        part = hf_ghost.ghost_norms(m, seqs, spans, masked_id=None, split=(m.base_model, head))
    finally:
        hook.remove()
    assert seen == [(3, 15, 32)]  # 3 rows x the longest span, not x 31 positions
    assert set(part) == set(whole)
    for k in whole:
        assert part[k].tolist() == pytest.approx(whole[k].tolist(), rel=1e-5, abs=1e-8), (arch, k)


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
    gpt2 = model("gpt2")  # wte is lm_head: a tied embedding has its cross-term rule
    assert gpt2.lm_head.weight is gpt2.transformer.wte.weight and hf_grad.GradNormRunner(gpt2, None).way() == "ghost"
    shared = _tiny("llama")  # two projections of one weight: no rule for that sharing
    mlp = shared.model.layers[0].mlp
    mlp.up_proj.weight = mlp.gate_proj.weight
    assert hf_ghost.supported(shared) == ("parameter model.layers.0.mlp.up_proj.weight is shared with "
                                          "model.layers.0.mlp.gate_proj.weight, and only an embedding tied to a "
                                          "linear head has a cross-term rule")
    assert hf_grad.GradNormRunner(shared, None).way() == "one_row"  # CPU: no vmap
    with pytest.warns(UserWarning, match="ghost norms cannot serve"):
        assert hf_grad.GradNormRunner(shared, None, mode="ghost").way() == "one_row"


def test_the_executor_says_how_grad_norm_rows_were_served_and_why_one_backward():
    """run.json's executor.served: per model, the way and the rows that took one backward each, by why."""
    from ..tiny_models import tiny_llama

    tied, shared = _tied_resource("llama"), tiny_llama(tokenizer(), seed=1)
    mlp = shared.model.layers[0].mlp
    mlp.up_proj.weight = mlp.gate_proj.weight  # no rule for this sharing: one backward per row on CPU
    shared = HFModel.from_pretrained_objects(shared.eval(), tokenizer(), name="shared-projection")
    reqs = grad_requests(tied, 10)  # 10 rows, one with p = 1, one with nothing scored
    ex = Executor()
    ex.serve([(m, r) for m in (tied, shared) for r in reqs])
    served = ex.stats.summary()["served"]
    assert served[ex.model_key(tied)] == {"grad_norm": {
        "way": "ghost", "rows_batched": 9, "rows_one_backward": 2,
        "one_backward_because": {"the first row: which parameters receive a gradient": 1,
                                 "p = 1: ghost norms give L2 norms only": 1}}}
    why = ("no ghost norms (parameter model.layers.0.mlp.up_proj.weight is shared with model.layers.0.mlp.gate_proj.weight, "
           "and only an embedding tied to a linear head has a cross-term rule), and vmap serves CUDA only")
    assert served[ex.model_key(shared)]["grad_norm"] == {
        "way": "one_row", "rows_batched": 0, "rows_one_backward": 11, "one_backward_because": {why: 11},
        "why_not_ghost": why[len("no ghost norms ("):-len("), and vmap serves CUDA only")]}


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


@pytest.mark.parametrize("mode", ["ghost", "one_row"])
def test_each_row_is_handed_back_as_its_backward_finishes(mode):
    """GradNorm is the slow MIA (a backward per row on CPU): each row's norm reaches the executor
    (streaming.finished: stored at once, the bar moved) before the batch returns, the value the
    batch returns, each row once."""
    from evaldag.engine import streaming

    res = HFModel(str(TINY_LLAMA / "target"))
    adapter, reqs = res.load(), grad_requests(res, 12)
    grad_backend.configure(adapter, mode, 4)
    seen: list[tuple[int, float]] = []
    with streaming.sink(lambda i, r: seen.append((i, r.value))):
        got = adapter.run_batch(reqs)
    assert sorted(i for i, _ in seen) == list(range(len(reqs)))
    assert all(v == got[i].value or (v != v and got[i].value != got[i].value) for i, v in seen)  # NaN: nothing scored
    if mode == "one_row":  # one backward per row: handed back in the order they ran, one at a time
        assert [i for i, _ in seen] == list(range(len(reqs)))
