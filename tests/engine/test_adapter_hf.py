"""The transformers adapter: batching must not change numbers, encodings must match
open-unlearning, and the fixture checkpoint must reproduce open-unlearning's own logs."""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest

from evaldag.engine.adapters.base import OutOfMemory, PromptTemplate
from evaldag.engine.adapters.hf import HFAdapter, HFModel
from evaldag.engine.cache import Cache, file_sha256
from evaldag.engine.executor import Executor
from evaldag.engine.requests import Generate, GenerationSettings, HiddenStates, TokenStats
from evaldag.metrics.unlearning.grad_backend import GradNorm

from ..conftest_models import (
    OPEN_UNLEARNING, TINY_LLAMA, model, one_thread, qa_texts, resource, tofu_rows, tokenizer,
)

torch = pytest.importorskip("torch")
one_thread()
PLAIN = PromptTemplate.plain()


def encoded(n: int = 10, subset: str = "forget10_perturbed", field: str = "answer"):
    enc = resource("llama").encoder()
    rows = tofu_rows(subset)
    # every 3rd answer doubled, so lengths really vary within a batch
    return [enc.encode_qa(r["question"], r[field] * (2 if i % 3 == 0 else 1), PLAIN) for i, r in enumerate(rows[:n])]


def stats_requests(n: int = 10):
    return [TokenStats(e.context_ids, e.continuation_ids) for e in encoded(n)]


def one_by_one(adapter, reqs):
    return [adapter.run_batch([r])[0] for r in reqs]


# ------------------------------------------------------------------------- token stats


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_batched_token_stats_equal_one_at_a_time(arch, side):
    reqs = stats_requests(10)
    assert len({r.length() for r in reqs}) > 5  # mixed lengths, so padding happens
    adapter = HFAdapter(model(arch), tokenizer(), padding_side=side)
    batched = adapter.run_batch(reqs)
    real, padded = adapter.last_batch_tokens
    assert real == sum(r.length() for r in reqs) and padded == len(reqs) * max(r.length() for r in reqs)
    for b, s, r in zip(batched, one_by_one(adapter, reqs), reqs):
        assert b.logprob.dtype == np.float32 and b.argmax.dtype == np.int32
        assert len(b.logprob) == len(r.continuation_ids)
        np.testing.assert_allclose(b.logprob, s.logprob, atol=1e-5, rtol=0)
        np.testing.assert_allclose(b.mu, s.mu, atol=1e-5, rtol=0)
        np.testing.assert_allclose(b.var, s.var, atol=1e-5, rtol=0)
        np.testing.assert_array_equal(b.argmax, s.argmax)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_token_stats_match_a_float64_reference(arch):
    """The chunked kernel (hidden states -> head, 3 rows per chunk) against full logits."""
    (r,) = stats_requests(1)
    adapter = HFAdapter(model(arch), tokenizer(), stats_chunk_rows=3)
    got = adapter.run_batch([r])[0]
    ids = torch.tensor([r.context_ids + r.continuation_ids])
    with torch.no_grad():
        logits = model(arch)(input_ids=ids).logits[0].double()
    c, n = len(r.context_ids), len(r.continuation_ids)
    logp = torch.log_softmax(logits[c - 1 : c - 1 + n], -1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    var = (p * logp**2).sum(-1) - mu**2
    np.testing.assert_allclose(got.logprob, logp[torch.arange(n), torch.tensor(r.continuation_ids)].numpy(), atol=2e-5)
    np.testing.assert_allclose(got.mu, mu.numpy(), atol=2e-5)
    np.testing.assert_allclose(got.var, var.numpy(), atol=5e-5)
    np.testing.assert_array_equal(got.argmax, logits[c - 1 : c - 1 + n].argmax(-1).numpy())
    assert np.ptp(got.logprob) > 0.1  # a random model, not a constant


def test_token_stats_need_a_context_token():
    with pytest.raises(ValueError, match="context token"):
        HFAdapter(model("llama"), tokenizer()).run_batch([TokenStats((), (5, 6))])


def test_out_of_memory_becomes_OutOfMemory(monkeypatch):
    adapter = HFAdapter(model("llama"), tokenizer())

    def boom(reqs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(adapter, "_token_stats", boom)
    with pytest.raises(OutOfMemory, match="did not fit"):
        adapter.run_batch(stats_requests(2))


# -------------------------------------------------------------------------- generation


def prompts(n: int = 8):
    return [e.prompt_ids for e in encoded(n)]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_batched_greedy_equals_one_at_a_time(arch):
    reqs = [Generate(p, GenerationSettings(max_new_tokens=24)) for p in prompts(8)]
    assert len({len(r.prompt_ids) for r in reqs}) > 3
    adapter = HFAdapter(model(arch), tokenizer())
    batched = adapter.run_batch(reqs)
    for b, s in zip(batched, one_by_one(adapter, reqs)):
        np.testing.assert_array_equal(b.token_ids, s.token_ids)
        assert b.text == s.text
    # non-degenerate outputs, so the comparison above could have failed
    assert all(len(set(b.token_ids.tolist())) >= 5 for b in batched)
    assert len({tuple(b.token_ids.tolist()) for b in batched}) == len(batched)


def test_stop_strings_are_honoured_during_batched_generation():
    adapter = HFAdapter(model("llama"), tokenizer())
    free = adapter.run_batch([Generate(p, GenerationSettings(max_new_tokens=24)) for p in prompts(8)])
    # a stop string that the unconstrained outputs of some (not all) prompts contain
    stop = next(t for t in (" the", "e", "a", "s") if 0 < sum(t in f.text for f in free) < len(free))
    reqs = [Generate(p, GenerationSettings(max_new_tokens=24, stop_strings=(stop,))) for p in prompts(8)]
    batched = adapter.run_batch(reqs)
    for f, b, s in zip(free, batched, one_by_one(adapter, reqs)):
        np.testing.assert_array_equal(b.token_ids, s.token_ids)
        n = len(b.token_ids)
        np.testing.assert_array_equal(b.token_ids, f.token_ids[:n])  # same greedy path, cut early
        if stop in f.text:
            assert stop in b.text and n < len(f.token_ids)
            assert stop not in tokenizer().decode(b.token_ids[:-1].tolist(), skip_special_tokens=True)
        else:  # finished sequences did not stop the others
            np.testing.assert_array_equal(b.token_ids, f.token_ids)
    # when a sequence meets its stop string, its row leaves the batch at once (not just
    # the returned ids are cut): the work is the prefill's rectangle plus one token per
    # row per step it was still running
    early = next(t for t in (" ", "e", "a") if all(t in tokenizer().decode(f.token_ids[:20].tolist()) for f in free))
    reqs = [Generate(p, GenerationSettings(max_new_tokens=24, stop_strings=("#", early))) for p in prompts(8)]
    batched = adapter.run_batch(reqs)
    _, padded = adapter.last_batch_tokens
    width = max(len(r.prompt_ids) for r in reqs)
    assert max(len(b.token_ids) for b in batched) <= 20
    real = sum(len(r.prompt_ids) + len(b.token_ids) for r, b in zip(reqs, batched))
    assert len({len(b.token_ids) for b in batched}) > 1
    # generate() computed every row until the longest finished; what is left here is
    # the prefill's left padding (prompts are prefilled in groups of similar length)
    assert padded - real <= 0.05 * padded < len(reqs) * (width + max(len(b.token_ids) for b in batched)) - real


def test_per_sequence_max_new_tokens_and_seeded_sampling():
    adapter = HFAdapter(model("llama"), tokenizer())
    ps = prompts(4)
    sample = [GenerationSettings(max_new_tokens=16, do_sample=True, temperature=1.5, top_p=0.95, seed=s) for s in (1, 2)]
    reqs = [Generate(ps[0], GenerationSettings(max_new_tokens=5)), Generate(ps[1], sample[0]),
            Generate(ps[2], sample[1]), Generate(ps[3], sample[0])]
    batched = adapter.run_batch(reqs)
    assert len(batched[0].token_ids) == 5
    for b, s in zip(batched, one_by_one(adapter, reqs[::-1])[::-1]):  # other order, other neighbours
        np.testing.assert_array_equal(b.token_ids, s.token_ids)
    greedy = adapter.run_batch([Generate(ps[1], GenerationSettings(max_new_tokens=16))])[0]
    assert not np.array_equal(batched[1].token_ids, greedy.token_ids)  # it really sampled
    other_seed = adapter.run_batch([Generate(ps[1], sample[1])])[0]
    assert not np.array_equal(batched[1].token_ids, other_seed.token_ids)


# ------------------------------------------------------------- hidden states, grad norm


def test_hidden_states_batched_equal_one_at_a_time():
    reqs = [HiddenStates(r.context_ids + r.continuation_ids, (0, 1, -1)) for r in stats_requests(4)]
    adapter = HFAdapter(model("llama"), tokenizer())
    for b, s, r in zip(adapter.run_batch(reqs), one_by_one(adapter, reqs), reqs):
        assert b.states.shape == (3, len(r.ids), 64) and b.states.dtype == np.float32
        # unnormalised states reach |20|; float32 noise between batch shapes is ~1e-6 of that
        np.testing.assert_allclose(b.states, s.states, rtol=1e-5, atol=5e-5)


def test_grad_norm_equals_a_hand_written_reference():
    m = model("llama")
    reqs = [GradNorm(r.context_ids, r.continuation_ids) for r in stats_requests(2)]
    reqs.append(GradNorm(reqs[0].context_ids, reqs[0].continuation_ids, p=1.0, exclude_last=False))
    got = HFAdapter(m, tokenizer()).run_batch(reqs)
    assert not m.training and all(p.grad is None for p in m.parameters())  # eval restored, grads cleared
    for r, g in zip(reqs, got):
        ids = torch.tensor([r.context_ids + r.continuation_ids])
        c, n = len(r.context_ids), len(r.continuation_ids) - int(r.exclude_last)
        m.zero_grad()
        logp = torch.log_softmax(m(input_ids=ids).logits[0], -1)
        loss = -torch.stack([logp[c - 1 + j, r.continuation_ids[j]] for j in range(n)]).mean()
        loss.backward()
        norms = [float(p.grad.norm(p=r.p)) for p in m.parameters() if p.grad is not None]
        m.zero_grad()
        assert g.value == pytest.approx(sum(norms) / len(norms), rel=1e-5)
    assert got[0].value != pytest.approx(got[1].value)


# ---------------------------------------------------------------------------- encoder


def test_encode_qa_reproduces_the_boundary_quirk_and_joint_fixes_it():
    tok = tokenizer()
    enc = resource("llama").encoder()
    q, a = "Where was the author Dara Ilves born?", "Dara Ilves was born in the city of Cusco."
    quirk = enc.encode_qa(q, a, PLAIN)
    joint = enc.encode_qa(q, a, PLAIN, joint=True)
    piece = tok.convert_ids_to_tokens
    # open-unlearning: the prompt ends in a lone space token, the full text merges it into "ĠDara",
    # which falls inside the context; the first answer token is never scored.
    assert piece(list(quirk.prompt_ids[-1:])) == ["Ġ"]
    assert piece(list(quirk.context_ids[-1:])) == ["ĠDara"]
    assert quirk.context_ids[:-1] == quirk.prompt_ids[:-1]
    assert quirk.continuation_ids[-1] == tok.eos_token_id
    # joint: the same ids, split before "ĠDara"
    assert joint.context_ids + joint.continuation_ids == quirk.context_ids + quirk.continuation_ids
    assert piece([joint.continuation_ids[0]]) == ["ĠDara"]
    assert len(joint.continuation_ids) == len(quirk.continuation_ids) + 1
    assert joint.prompt_ids == quirk.prompt_ids
    # the same with few-shot turns and a system prompt with special tokens
    t = PromptTemplate(system_prompt_with_special_tokens="<|begin_of_text|>Be brief.\n")
    fs = enc.encode_qa(q, a, t, fewshot=[("Who?", "Dara."), ("When?", "1971.")])
    text = tok.decode(list(fs.prompt_ids))
    assert "Question: Who?\nAnswer: Dara.\n\nQuestion: When?\nAnswer: 1971.\n\nQuestion: Where" in text
    assert text.endswith("Answer: ")


def test_encode_qa_truncates_like_open_unlearning():
    enc = resource("llama").encoder()
    e = enc.encode_qa("Where was the author Dara Ilves born?", "Dara Ilves was born " * 50, PLAIN, max_length=40)
    assert len(e.context_ids) + len(e.continuation_ids) == 41  # 40 + the eos appended after truncation
    assert e.continuation_ids[-1] == enc.eos_token_id


def test_encode_qa_with_the_chat_template():
    tok = tokenizer()
    enc = resource("llama").encoder()
    e = enc.encode_qa("Who?", "Dara.", PromptTemplate.chat(system_prompt="You are helpful."))
    full = tok.decode(list(e.context_ids + e.continuation_ids))
    assert full.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>")
    assert full.endswith("assistant<|end_header_id|>\n\nDara.<|eot_id|><|endoftext|>")  # eos != eot: appended
    assert tok.decode(list(e.prompt_ids)).endswith("Who?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "system" not in tok.decode(list(enc.encode_qa("Who?", "Dara.", PromptTemplate.chat()).prompt_ids))
    joint = enc.encode_qa("Who?", "Dara.", PromptTemplate.chat(system_prompt="You are helpful."), joint=True)
    assert joint.context_ids + joint.continuation_ids == e.context_ids + e.continuation_ids
    assert tok.decode(list(joint.continuation_ids)) == "Dara.<|eot_id|><|endoftext|>"
    # date_string reaches the template only when given
    saved = tok.chat_template
    try:
        tok.chat_template = "{{ date_string | default('NODATE') }}|{% for m in messages %}{{ m['content'] }};{% endfor %}"
        assert tok.decode(list(enc.encode_qa("Q", "A", PromptTemplate.chat(date_string="26 Jul 2024")).prompt_ids),
                          skip_special_tokens=True).startswith("26 Jul 2024|")
        assert tok.decode(list(enc.encode_qa("Q", "A", PromptTemplate.chat()).prompt_ids),
                          skip_special_tokens=True).startswith("NODATE|")
    finally:
        tok.chat_template = saved


def test_encode_completion():
    tok = tokenizer()
    enc = resource("llama").encoder()
    e = enc.encode_completion("The author", "Dara Ilves wrote", insert_space=True)
    full = tok("The author Dara Ilves wrote")["input_ids"]
    assert e.context_ids + e.continuation_ids == tuple(full)
    assert e.context_ids == e.prompt_ids == tuple(tok("The author")["input_ids"])
    assert e.continuation_ids[-1] != tok.eos_token_id  # no eos appended
    glued = enc.encode_completion("The author", "Dara", insert_space=False)
    assert glued.context_ids + glued.continuation_ids == tuple(tok("The authorDara")["input_ids"])
    empty = enc.encode_completion("", "Dara Ilves wrote")
    assert empty.context_ids == (tok.bos_token_id,) and len(empty.continuation_ids) > 2
    assert len(enc.encode_completion("The author", "Dara Ilves wrote a book", max_length=3).continuation_ids) == 3


# ------------------------------------------------------------------ resource, fixtures


def test_fingerprints_follow_content(tmp_path, cache_dir):
    from ..tiny_models import save_tiny_model

    a = save_tiny_model(tmp_path / "a", tokenizer=tokenizer(), seed=0)
    b = save_tiny_model(tmp_path / "b", tokenizer=tokenizer(), seed=0)
    c = save_tiny_model(tmp_path / "c", tokenizer=tokenizer(), seed=1)
    memo = Cache(cache_dir).filehash
    with memo.active():  # as run() does: the running cache's memo
        fa = HFModel(a, dtype="fp32").fingerprint()
        assert fa == HFModel(b, dtype="fp32").fingerprint()  # same bytes, other path
        assert fa != HFModel(c, dtype="fp32").fingerprint()
        assert fa != HFModel(a, dtype="bf16").fingerprint()
        assert HFModel(a).fingerprint() == fa  # auto on a float32 checkpoint is fp32 everywhere
    index = json.loads(memo.path.read_text())
    weights = str((a / "model.safetensors").resolve())
    assert index[weights]["sha256"] == file_sha256(weights, memo=False)
    index[weights]["sha256"] = "0" * 64  # the memo is trusted while the file's stat matches ...
    memo.path.write_text(json.dumps(index))
    assert file_sha256(weights, memo) == "0" * 64
    assert file_sha256(weights) != "0" * 64  # outside a run there is no memo: the file is read
    st = os.stat(weights)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # ... and not once the file changes
    assert file_sha256(weights, memo) != "0" * 64
    mem = resource("llama").fingerprint()
    assert mem == resource("llama").fingerprint() != resource("llama", seed=1).fingerprint()
    with pytest.raises(FileNotFoundError):
        HFModel(tmp_path / "missing")


def test_fixture_checkpoint_reproduces_open_unlearning_avg_loss(cache_dir):
    """forget_Q_A_Prob avg_loss (all continuation tokens, eos included) on the first 10
    forget items, plain template, through HFModel + Executor."""
    ref = json.loads((OPEN_UNLEARNING / "target_TOFU_EVAL.json").read_text())
    m = HFModel(TINY_LLAMA / "target", dtype="fp32", device="cpu")
    enc = m.encoder()
    rows = tofu_rows()[:10]
    reqs = []
    for r in rows:
        e = enc.encode_qa(r["question"], r["answer"], PLAIN)
        reqs.append(TokenStats(e.context_ids, e.continuation_ids))
    got = Executor().serve([(m, r) for r in reqs])
    for i, res in enumerate(got):
        want = ref["forget_Q_A_Prob"]["value_by_index"][str(i)]["avg_loss"]
        assert float(-res.logprob.astype(np.float64).mean()) == pytest.approx(want, abs=1e-4, rel=0)
    # the boundary quirk is in play: a joint split scores one more token per item and moves the loss
    joint = enc.encode_qa(rows[0]["question"], rows[0]["answer"], PLAIN, joint=True)
    assert len(joint.continuation_ids) == len(reqs[0].continuation_ids) + 1
    # greedy generation reproduces open-unlearning's forget_Q_A_ROUGE generations
    gens = Executor().serve([(m, Generate(enc.encode_qa(r["question"], r["answer"], PLAIN).prompt_ids,
                                           GenerationSettings(max_new_tokens=200))) for r in rows[:4]])
    for i, g in enumerate(gens):
        assert g.text.strip() == ref["forget_Q_A_ROUGE"]["value_by_index"][str(i)]["generation"]
    # and GradNorm reproduces mia_gradnorm's forget scores: float32 gradients summed over every
    # parameter round differently across CPUs (1.2e-4 relative measured on an AVX2-only EPYC
    # against logs made elsewhere with transformers 4.45), hence 3e-4
    norms = Executor().serve([(m, GradNorm(r.context_ids, r.continuation_ids)) for r in reqs[:2]])
    for i, g in enumerate(norms):
        assert g.value == pytest.approx(ref["mia_gradnorm"]["forget"]["value_by_index"][str(i)]["score"], rel=3e-4)


# ------------------------------------------------- attention mask: open-unlearning's ids != pad
#
# open-unlearning's collator sets attention_mask = input_ids != pad_token_id, and a tokenizer
# without a pad token gets pad = eos. HFModel(attention_mask="reference") (the default)
# reproduces that; "padding" masks only the padding. Two tokenizers where it matters:
#   gpt2:  bos == eos == pad (GPT-2 style); the bos that starts every sequence is masked.
#   llama: Llama-3-Instruct style, eos = <|eot_id|> ends every chat turn, pad = eos; the
#          prompt's turn ends are masked.


@functools.lru_cache(maxsize=None)
def pad_is_eos(style: str):
    """(model, tokenizer) whose tokenizer has no pad token of its own (pad becomes eos)."""
    from ..tiny_models import EOS, EOT, tiny_gpt2, tiny_llama, tiny_tokenizer

    if style == "gpt2":
        tok, build = tiny_tokenizer(qa_texts(), bos=EOS, pad=None), tiny_gpt2
    else:
        tok, build = tiny_tokenizer(qa_texts(), eos=EOT, pad=None), tiny_llama
    m = build(tok, initializer_range=0.3)
    HFModel.from_pretrained_objects(m, tok)  # applies the no-pad rule: pad = eos
    assert tok.pad_token_id == tok.eos_token_id is not None
    return m, tok


def pad_is_eos_resource(style: str, mode: str = "reference") -> HFModel:
    m, tok = pad_is_eos(style)
    return HFModel.from_pretrained_objects(m, tok, name=f"pad-eos-{style}", attention_mask=mode)


def pad_is_eos_encoded(style: str, n: int = 6):
    enc = pad_is_eos_resource(style).encoder()
    t = PromptTemplate.chat(system_prompt="Answer briefly.") if style == "llama" else PLAIN
    out = [enc.encode_qa(r["question"], r["answer"] * (2 if i % 3 == 0 else 1), t) for i, r in enumerate(tofu_rows()[:n])]
    pad = enc.pad_token_id
    # the pad id really occurs inside the inputs, away from any padding
    assert all(pad in e.context_ids[:-1] for e in out)
    if style == "llama":
        assert all(e.context_ids.count(pad) == 2 and e.continuation_ids[-1] == pad for e in out)  # 2 turn ends + eos
    else:
        assert all(e.context_ids[0] == pad for e in out)  # the bos
    return out


def ou_logprobs(m, pad: int, reqs) -> list[np.ndarray]:
    """open-unlearning's collator + forward: right pad with the pad id, mask = ids != pad,
    no position ids, log_softmax, gather."""
    seqs = [torch.tensor(r.context_ids + r.continuation_ids) for r in reqs]
    ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad)
    with torch.no_grad():
        logits = m(input_ids=ids, attention_mask=ids.ne(pad)).logits
    lp = torch.gather(torch.log_softmax(logits, -1)[:, :-1], 2, ids[:, 1:, None])[..., 0]
    return [lp[i, len(r.context_ids) - 1 : len(r.context_ids) - 1 + len(r.continuation_ids)].numpy()
            for i, r in enumerate(reqs)]


def unmasked_logprobs(m, r) -> np.ndarray:
    """One unpadded sequence, every token attended."""
    ids = torch.tensor([r.context_ids + r.continuation_ids])
    with torch.no_grad():
        lp = torch.log_softmax(m(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0], -1)
    c, n = len(r.context_ids), len(r.continuation_ids)
    return lp[c - 1 : c - 1 + n].gather(1, torch.tensor(r.continuation_ids)[:, None])[:, 0].numpy()


@pytest.mark.parametrize("style", ["gpt2", "llama"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_reference_mask_reproduces_open_unlearning_and_padding_mode_does_not(style, side):
    m, tok = pad_is_eos(style)
    reqs = [TokenStats(e.context_ids, e.continuation_ids) for e in pad_is_eos_encoded(style)]
    assert len({r.length() for r in reqs}) > 3
    ref = HFAdapter(m, tok, padding_side=side)  # the default is "reference"
    pad_only = HFAdapter(m, tok, padding_side=side, attention_mask="padding")
    want_batched = ou_logprobs(m, tok.pad_token_id, reqs)
    want_single = [ou_logprobs(m, tok.pad_token_id, [r])[0] for r in reqs]
    got_batched, got_single = ref.run_batch(reqs), one_by_one(ref, reqs)
    for gb, gs, wb, ws in zip(got_batched, got_single, want_batched, want_single):
        np.testing.assert_allclose(gb.logprob, wb, atol=1e-5, rtol=0)
        np.testing.assert_allclose(gs.logprob, ws, atol=1e-5, rtol=0)
    # padding mode: the corrected numbers, which really differ from open-unlearning's
    pb, ps = pad_only.run_batch(reqs), one_by_one(pad_only, reqs)
    for b, s, r, w in zip(pb, ps, reqs, want_single):
        clean = unmasked_logprobs(m, r)
        np.testing.assert_allclose(b.logprob, clean, atol=1e-5, rtol=0)
        np.testing.assert_allclose(s.logprob, clean, atol=1e-5, rtol=0)
    assert max(float(np.abs(b.logprob - w).max()) for b, w in zip(pb, want_single)) > 1e-3
    if side == "right":  # through the resource: the option reaches the adapter
        res = pad_is_eos_resource(style).load().run_batch(reqs)
        np.testing.assert_array_equal(res[0].logprob, got_batched[0].logprob)
        res = pad_is_eos_resource(style, "padding").load().run_batch(reqs)
        np.testing.assert_array_equal(res[0].logprob, pb[0].logprob)


@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_reference_mask_generation_equals_open_unlearning_generate(style):
    m, tok = pad_is_eos(style)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    reqs = [Generate(e.prompt_ids, GenerationSettings(max_new_tokens=20)) for e in pad_is_eos_encoded(style)]
    got = {mode: pad_is_eos_resource(style, mode).load() for mode in ("reference", "padding")}
    batched = {mode: a.run_batch(reqs) for mode, a in got.items()}
    differs = 0
    for i, r in enumerate(reqs):
        ids = torch.tensor([r.prompt_ids])
        with torch.no_grad():
            out = m.generate(ids, attention_mask=ids != pad, max_new_tokens=20, do_sample=False, pad_token_id=eos)
        want = out[0, ids.shape[1] :].numpy()
        if eos in want.tolist():
            want = want[: want.tolist().index(eos) + 1]
        single = got["reference"].run_batch([r])[0]
        np.testing.assert_array_equal(single.token_ids, want)
        np.testing.assert_array_equal(batched["reference"][i].token_ids, want)
        # padding mode: batched == one at a time as well, and not open-unlearning's tokens
        np.testing.assert_array_equal(batched["padding"][i].token_ids, got["padding"].run_batch([r])[0].token_ids)
        differs += not np.array_equal(batched["padding"][i].token_ids, want)
    assert differs > 0
    # not degenerate, so the comparisons could have failed (one llama prompt stops at once on the eos)
    assert sum(len(set(b.token_ids.tolist())) >= 10 for b in batched["reference"]) >= len(reqs) - 1


def test_reference_mask_grad_norm_and_hidden_states():
    m, tok = pad_is_eos("llama")
    pad = tok.pad_token_id
    e = pad_is_eos_encoded("llama", 1)[0]
    req = GradNorm(e.context_ids, e.continuation_ids)
    values = {}
    for mode in ("reference", "padding"):
        values[mode] = HFAdapter(m, tok, attention_mask=mode).run_batch([req])[0].value
        ids = torch.tensor([e.context_ids + e.continuation_ids])
        mask = ids.ne(pad) if mode == "reference" else torch.ones_like(ids)
        c, n = len(e.context_ids), len(e.continuation_ids) - 1
        m.zero_grad()
        logp = torch.log_softmax(m(input_ids=ids, attention_mask=mask).logits[0], -1)
        (-logp[c - 1 : c - 1 + n].gather(1, ids[0, c : c + n, None]).mean()).backward()
        norms = [float(p.grad.norm()) for p in m.parameters() if p.grad is not None]
        m.zero_grad(set_to_none=True)
        assert values[mode] == pytest.approx(sum(norms) / len(norms), rel=1e-5)
    assert values["reference"] != pytest.approx(values["padding"], rel=1e-3)
    # hidden states have no open-unlearning counterpart: only padding is masked in both modes
    hs = [HiddenStates(e.context_ids, (0, -1)), HiddenStates((pad,), (0, -1))]
    a = HFAdapter(m, tok).run_batch(hs)
    b = HFAdapter(m, tok, attention_mask="padding").run_batch(hs)
    for x, y in zip(a, b):
        assert np.isfinite(x.states).all()
        np.testing.assert_array_equal(x.states, y.states)


@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_reference_mask_grad_norm_rows_share_a_ghost_backward(style):
    """Every row holds the pad id (GPT-2: the bos, of a tied model; Llama-3 style: turn ends
    and the eos): ghost norms mask it as open-unlearning does, in batches, and equal one
    backward per row."""
    from evaldag.metrics.unlearning import grad_backend

    res = pad_is_eos_resource(style)
    reqs = [GradNorm(e.context_ids, e.continuation_ids) for e in pad_is_eos_encoded(style, 10)]
    batched, single = res.load(), HFAdapter(*pad_is_eos(style))
    grad_backend.configure(single, rows=1)
    got = [r.value for r in batched.run_batch(reqs)]
    assert got == pytest.approx([r.value for r in single.run_batch(reqs)], rel=2e-5)
    account = grad_backend.served(batched)
    assert account["way"] == "ghost" and account["rows_batched"] == len(reqs) - 1, account
    assert account["one_backward_because"] == {"the first row: which parameters receive a gradient": 1}


def test_mask_mode_is_in_the_fingerprint_only_where_it_matters(tmp_path):
    from ..tiny_models import EOS, EOT, save_tiny_model, tiny_tokenizer

    def fps(path):
        return [HFModel(path, dtype="fp32", attention_mask=mode).fingerprint() for mode in ("reference", "padding")]

    # in memory, pad == eos
    for style in ("gpt2", "llama"):
        a, b = (pad_is_eos_resource(style, mode) for mode in ("reference", "padding"))
        assert a.mask_mode_matters() and a.fingerprint() != b.fingerprint()
        assert a.fingerprint() == pad_is_eos_resource(style).fingerprint()
    assert not resource("llama").mask_mode_matters()  # the conftest tokenizer has a <pad>
    # checkpoints: no pad token (pad = eos), and a pad that the chat template writes
    no_pad = save_tiny_model(tmp_path / "gpt2", arch="gpt2", tokenizer=tiny_tokenizer(qa_texts(), bos=EOS, pad=None))
    eot_pad = save_tiny_model(tmp_path / "eot", tokenizer=tiny_tokenizer(qa_texts(), pad=EOT))
    for path in (no_pad, eot_pad):
        r, p = fps(path)
        assert r != p and HFModel(path, dtype="fp32").fingerprint() == r
    r, p = fps("evaldag-test/never-downloaded")  # an unresolvable hub id: assume it matters
    assert r != p
    # a dedicated pad: one fingerprint (and one cache) for both modes
    r, p = fps(TINY_LLAMA / "target")
    assert r == p
    with pytest.raises(ValueError, match="attention_mask"):
        HFModel(TINY_LLAMA / "target", attention_mask="none")


def test_dedicated_pad_gives_identical_numbers_in_both_modes(cache_dir):
    reqs_enc = []
    models = {mode: HFModel(TINY_LLAMA / "target", dtype="fp32", device="cpu", attention_mask=mode)
              for mode in ("reference", "padding")}
    enc = models["reference"].encoder()
    chat = PromptTemplate.chat(system_prompt="Answer briefly.")
    for i, r in enumerate(tofu_rows()[:4]):
        reqs_enc.append(enc.encode_qa(r["question"], r["answer"], chat if i % 2 else PLAIN))
    assert any(enc.tokenizer.convert_tokens_to_ids("<|eot_id|>") in e.context_ids for e in reqs_enc)
    stats = [TokenStats(e.context_ids, e.continuation_ids) for e in reqs_enc]
    gens = [Generate(e.prompt_ids, GenerationSettings(max_new_tokens=16)) for e in reqs_enc]
    grads = [GradNorm(e.context_ids, e.continuation_ids) for e in reqs_enc[:1]]
    out = {mode: [m.load().run_batch(x) for x in (stats, gens, grads)] for mode, m in models.items()}
    (s1, g1, n1), (s2, g2, n2) = out["reference"], out["padding"]
    for a, b in zip(s1, s2):
        np.testing.assert_array_equal(a.logprob, b.logprob)
        np.testing.assert_array_equal(a.var, b.var)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
    assert n1[0].value == n2[0].value


def test_cli_attention_mask_option():
    import argparse

    from evaldag.benchmarks import common

    p = argparse.ArgumentParser()
    common.add_model_arguments(p)
    path = str(TINY_LLAMA / "target")
    opts = common.ModelOptions(**common.model_options(p.parse_args([])))
    assert common.hf_model(path, opts).attention_mask == "reference"
    opts = common.ModelOptions(**common.model_options(p.parse_args(["--attention-mask", "padding"])))
    assert common.hf_model(path, opts).attention_mask == "padding"
    with pytest.raises(SystemExit):
        p.parse_args(["--attention-mask", "all"])

