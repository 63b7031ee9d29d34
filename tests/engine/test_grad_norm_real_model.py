"""GradNorm on SmolLM2-135M-Instruct (tied embeddings, pad == eos, 49,152 tokens): ghost
norms in one padded batch equal one backward per row. Part of the real-model tier (the
session's one loaded model, tests/realmodel.py); about 30 s on one CPU thread."""

from __future__ import annotations

import pytest

from ..conftest_models import tofu_rows

pytestmark = pytest.mark.realmodel


def test_ghost_norms_of_a_real_tied_model_equal_one_backward_per_row(smollm):
    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf import HFAdapter, HFModel
    from evaldag.metrics.unlearning import grad_backend
    from evaldag.metrics.unlearning.grad_backend import GradNorm

    model, tok = smollm.model, smollm.tokenizer
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    res = HFModel.from_pretrained_objects(model, tok, name="smollm2-135m")
    enc = res.encoder()
    rows = tofu_rows("forget10_perturbed")[:6]
    reqs = [GradNorm(e.context_ids, e.continuation_ids)
            for e in (enc.encode_qa(r["question"], r["answer"], PromptTemplate.chat()) for r in rows)]
    assert all(tok.pad_token_id in r.continuation_ids for r in reqs)  # its eos: masked, as open-unlearning does
    batched = res.load()
    got = [r.value for r in batched.run_batch(reqs)]
    single = HFAdapter(model, tok)
    grad_backend.configure(single, rows=1)
    want = [r.value for r in single.run_batch(reqs)]
    # one_row's own float32 weight gradients are ~2e-5 off a float64 backward here; ghost norms ~5e-7
    assert got == pytest.approx(want, rel=1e-4)
    account = grad_backend.served(batched)
    assert account["way"] == "ghost" and account["rows_batched"] == len(reqs) - 1, account
