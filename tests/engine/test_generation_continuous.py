"""Continuous-batched generation (hf_generation.DecodeLoop) gives, row by row, the tokens
of plain batched ``generate`` and of each row generated alone, on the trained fixture
checkpoints, while computing almost no padding."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from evaldag.engine.adapters.base import PromptTemplate
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.adapters.hf.hf_adapter import GENERATE_GROUP
from evaldag.engine.adapters.hf.hf_generation import DecodeLoop, hf_generate, lean_loop_fits
from evaldag.engine.batching import Budget, pack
from evaldag.engine.executor import Executor
from evaldag.engine.requests import Generate, GenerationSettings

from ..conftest_models import TINY_LLAMA, model, one_thread, resource, tofu_rows
from .test_adapter_hf import prompts as tiny_prompts

torch = pytest.importorskip("torch")
one_thread()


@functools.lru_cache(maxsize=None)
def fixture(name: str):
    res = HFModel(str(TINY_LLAMA / name))
    return res, res.load()


@functools.lru_cache(maxsize=None)
def prompts(name: str) -> tuple:
    """Every question of the fixture's perturbed sets, and the forget paraphrases (164)."""
    enc, plain = fixture(name)[0].encoder(), PromptTemplate.plain()
    rows = [r["question"] for s in ("forget10_perturbed", "retain_perturbed", "real_authors_perturbed",
                                    "world_facts_perturbed") for r in tofu_rows(s)]
    rows += [r["paraphrased_question"] for r in tofu_rows("forget10_perturbed")]
    return tuple(enc.encode_qa(q, "x", plain).prompt_ids for q in rows)


def plain_generate(adapter, reqs, batch: int = 16):
    """transformers' generate in batches of ``batch`` (the path before the decode loop)."""
    out, real, padded = [], 0, 0
    for a in range(0, len(reqs), batch):
        part = reqs[a : a + batch]
        ids, mask, _, _ = adapter.pad([r.prompt_ids for r in part], "left")
        got, cost = hf_generate(adapter, part, ids, mask)
        out += got
        real, padded = real + sum(len(r.prompt_ids) + len(g.token_ids) for r, g in zip(part, got)), padded + cost
    return out, 1 - real / padded


def same(a, b) -> None:
    np.testing.assert_array_equal(a.token_ids, b.token_ids)
    assert a.text == b.text


@pytest.mark.parametrize("name", ["target", "retain"])
def test_continuous_batching_equals_plain_generate_row_by_row(name):
    _, adapter = fixture(name)
    assert lean_loop_fits(adapter.model)
    # longest first, as the executor orders them, so prefills pad little
    reqs = sorted((Generate(p, GenerationSettings(max_new_tokens=200)) for p in prompts(name)), key=lambda r: -r.length())
    plain, plain_padding = plain_generate(adapter, reqs)
    loop = DecodeLoop(adapter.model, adapter.tokenizer, adapter.pad_id, adapter.masked_id, slots=12)
    got = loop.run(reqs)
    for g, p in zip(got, plain):
        same(g, p)
    real, computed = loop.tokens
    assert real == sum(len(r.prompt_ids) + len(g.token_ids) for r, g in zip(reqs, got))
    # rows end at different steps (so rows really left and others took their place) ...
    lengths = [len(g.token_ids) for g in got]
    assert min(lengths) < 5 and max(lengths) > 20 and len(set(lengths)) > 10
    # ... and the work follows the real tokens: generate() pads each row to its batch's longest
    assert plain_padding > 0.15 and 1 - real / computed <= 0.05
    for i in range(0, len(reqs), 23):  # and each row alone
        same(DecodeLoop(adapter.model, adapter.tokenizer, adapter.pad_id, adapter.masked_id, 1).run([reqs[i]])[0], got[i])


def test_a_head_every_prompt_shares_is_prefilled_once_and_no_token_changes():
    """A system prompt before every question: each prefill group forwards it once and repeats
    its keys and values for every row (hf_heads.head_layout), and every generated token is the
    one of prompts prefilled whole; the account counts the groups and the tokens saved."""
    from evaldag.engine.adapters.hf import hf_prefix

    _, adapter = fixture("target")
    system = tuple(adapter.tokenizer("You are a careful assistant. Answer the question about the author.",
                                     add_special_tokens=False).input_ids)
    reqs = sorted((Generate(system + p, GenerationSettings(max_new_tokens=60)) for p in prompts("target")[:60]),
                  key=lambda r: -r.length())
    args = (adapter.model, adapter.tokenizer, adapter.pad_id, adapter.masked_id, 12)
    whole = DecodeLoop(*args).run(reqs)
    heads = hf_prefix.PrefixSharing("heads")
    loop = DecodeLoop(*args, heads=heads)
    got = loop.run(reqs)
    for g, w in zip(got, whole):
        same(g, w)
    c = heads.counts
    assert c["rows"] == len(reqs) and c["heads"] >= 5  # the first prefill and the refills
    assert c["tokens_asked"] == sum(len(r.prompt_ids) for r in reqs)
    assert c["tokens_asked"] - c["tokens_forwarded"] >= (len(reqs) - c["heads"]) * len(system) * 0.9
    real, computed = loop.tokens
    # real: the tokens forwarded, a group's head once (it may run past the system prompt: "Question:")
    assert real <= sum(len(r.prompt_ids) + len(g.token_ids) for r, g in zip(reqs, got)) - \
        (len(reqs) - c["heads"]) * len(system) and computed >= real


def test_executor_hands_the_loop_whole_groups_and_results_do_not_change():
    res, adapter = fixture("target")
    reqs = [Generate(p, GenerationSettings(max_new_tokens=200)) for p in prompts("target")]
    ex = Executor(batch_tokens=1024)  # 1024 // (prompt + 200) = 4 rows at once
    got = ex.serve([(res, r) for r in reqs])
    st = ex.stats.by_kind["generate"]
    plain_batches = len(pack(reqs, Generate.length, Budget(1024, 32)))
    assert plain_batches > 40 and st.batches <= -(-plain_batches // GENERATE_GROUP) + 1
    assert st.padding_fraction <= 0.05
    plain, _ = plain_generate(adapter, reqs)
    for g, p in zip(got, plain):
        same(g, p)


def test_seeded_sampling_and_stop_strings_do_not_depend_on_neighbours():
    adapter = resource("llama").load()
    ps = tiny_prompts(10)
    settings = [GenerationSettings(max_new_tokens=24, do_sample=True, temperature=1.3, top_p=0.9, seed=s) for s in (1, 2)]
    settings += [GenerationSettings(max_new_tokens=n, stop_strings=(" a",)) for n in (8, 24)]
    reqs = [Generate(p, settings[i % 4]) for i, p in enumerate(ps)]
    loop = lambda slots: DecodeLoop(adapter.model, adapter.tokenizer, adapter.pad_id, adapter.masked_id, slots)  # noqa: E731
    batched = loop(3).run(reqs)  # three rows at once: rows leave and newcomers join
    alone = [loop(1).run([r])[0] for r in reqs]
    ids, mask, _, _ = adapter.pad([r.prompt_ids for r in reqs], "left")
    plain, _ = hf_generate(adapter, reqs, ids, mask)
    for b, a, p, r in zip(batched, alone, plain, reqs):
        same(b, a)
        same(b, p)
        if r.settings.stop_strings and len(b.token_ids) < r.settings.max_new_tokens:
            assert " a" in b.text and " a" not in adapter.tokenizer.decode(b.token_ids[:-1].tolist())
    assert len({tuple(b.token_ids.tolist()) for b in batched}) == len(batched)  # not degenerate
    assert any(r.settings.stop_strings and len(b.token_ids) < r.settings.max_new_tokens for b, r in zip(batched, reqs))


def test_a_model_with_logits_processors_keeps_generate():
    m = model("llama", seed=3)
    res = HFModel.from_pretrained_objects(m, resource("llama").load().tokenizer, name="tiny-penalty")
    adapter = res.load()
    m.generation_config.repetition_penalty = 1.5
    try:
        assert not lean_loop_fits(m)
        reqs = [Generate(p, GenerationSettings(max_new_tokens=16)) for p in tiny_prompts(4)]
        got = adapter.run_batch(reqs)
        for r, g in zip(reqs, got):
            ids = torch.tensor([r.prompt_ids])
            want = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                              pad_token_id=adapter.tokenizer.eos_token_id, repetition_penalty=1.5)
            np.testing.assert_array_equal(g.token_ids, want[0, ids.shape[1] :].numpy()[: len(g.token_ids)])
    finally:
        m.generation_config.repetition_penalty = 1.0
