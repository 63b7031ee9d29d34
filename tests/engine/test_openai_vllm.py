"""``openai:`` against a real vLLM server (CPU, fp32) on the head_dim-64 test Llama, compared
with ``hf:`` on the same folder: token statistics, greedy and seeded generation, stop
strings, the identity probe, the server doing the work, and item 8's bad input against
a real server (401, unknown served model, a tokenizer that disagrees).

The server starts once per session (tests/servers.py); without the vLLM venv these tests
skip locally and fail under CI=true."""

from __future__ import annotations

import numpy as np
import pytest

from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.adapters.openai.openai_model import BackendError, OpenAIModel
from evaldag.engine.requests import Generate, GenerationSettings, TokenStats

from ..conftest_models import TINY_LLAMA

TEXTS = ["Where was the author Dara Ilves born?", "Dara Ilves was born in the city of Cusco.",
         "The capital of France is", "One two three four five six seven eight nine ten",
         "What genre does Dara Ilves mostly write in? horror and mystery"]


@pytest.fixture(scope="module")
def pair(server_model, vllm_server):
    mdir, tdir = server_model
    hf = HFModel(mdir, dtype="fp32", device="cpu")
    oa = OpenAIModel(vllm_server.url + "/v1", tokenizer=str(tdir), served=vllm_server.served, dtype="float32")
    return hf, oa.check()


def stats_requests(enc):
    out = []
    for t in TEXTS:
        ids = enc.encode(t)
        for cut in (1, len(ids) // 2):
            out.append(TokenStats(tuple(ids[:cut]), tuple(ids[cut:])))
    return out


def test_token_stats_equal_hf_within_1e_4(pair):
    hf, oa = pair
    reqs = stats_requests(hf.encoder())
    want, got = hf.load().run_batch(reqs), oa.load().run_batch(reqs)
    worst = max(float(np.max(np.abs(w.logprob - g.logprob))) for w, g in zip(want, got))
    assert worst < 1e-4, worst
    for w, g in zip(want, got):
        assert np.array_equal(w.argmax, g.argmax)
        assert g.mu is None and g.var is None  # no full-vocabulary statistics from a server: not available, not NaN
    assert oa.describe()["logprob_mode"] == "prompt_logprobs"


def test_greedy_and_stop_strings_equal_hf(pair):
    hf, oa = pair
    enc = hf.encoder()
    greedy = GenerationSettings(max_new_tokens=24)
    stop = GenerationSettings(max_new_tokens=24, stop_strings=(" the", "."))
    reqs = [Generate(tuple(enc.encode(t)), s) for t in TEXTS for s in (greedy, stop)]
    want, got = hf.load().run_batch(reqs), oa.load().run_batch(reqs)
    for r, w, g in zip(reqs, want, got):
        assert g.token_ids.tolist() == w.token_ids.tolist(), r
        assert g.text == w.text


def test_seeded_sampling_is_reproducible_and_seed_dependent(pair):
    _, oa = pair
    ids = tuple(oa.encoder().encode(TEXTS[2]))
    a = [Generate(ids, GenerationSettings(max_new_tokens=16, do_sample=True, seed=s)) for s in (1, 1, 2)]
    got = oa.load().run_batch(a)
    assert got[0].token_ids.tolist() == got[1].token_ids.tolist()
    assert got[0].token_ids.tolist() != got[2].token_ids.tolist()


def test_identity_is_stable_and_apart_from_hf(pair, vllm_server):
    hf, oa = pair
    again = OpenAIModel(vllm_server.url, tokenizer=oa.tokenizer, served=vllm_server.served, dtype="float32")
    assert again.fingerprint() == oa.fingerprint() != hf.fingerprint()
    assert oa.identity().digest().startswith("~openai-") and hf.identity().digest() == ""
    assert oa.identity().device == "server" and dict(oa.identity().details)["served_model"] == "tiny"
    ident = oa.server_identity()
    assert ident["kind"] == "vllm" and ident["version"] == "0.32.0" and ident["served_model"] == "tiny"
    assert ident["max_model_len"] == 512 and len(ident["probe"]["ids"]) == 4
    other_dtype = OpenAIModel(vllm_server.url, tokenizer=oa.tokenizer, served="tiny", dtype="bfloat16")
    assert other_dtype.fingerprint() != oa.fingerprint()


def test_the_server_did_the_work(pair, vllm_server, server_model):
    _, oa = pair
    mdir, tdir = server_model
    assert not any(p.suffix in (".safetensors", ".bin") for p in tdir.iterdir())
    before = vllm_server.prompt_tokens()
    ids = oa.encoder().encode("Dara Ilves was born in the year 1971.")
    oa.load().run_batch([TokenStats(tuple(ids[:3]), tuple(ids[3:]))])
    assert vllm_server.prompt_tokens() - before >= len(ids)


def test_unknown_served_model_and_disagreeing_tokenizer(vllm_server, server_model):
    _, tdir = server_model
    with pytest.raises(BackendError) as e:
        OpenAIModel(vllm_server.url, tokenizer=str(tdir), served="nope").check()
    assert str(e.value) == f"openai:{vllm_server.url} does not serve 'nope' (it serves: tiny); give one of them: --model-arg served_model=NAME"
    with pytest.raises(BackendError) as e:
        OpenAIModel(vllm_server.url, tokenizer=str(TINY_LLAMA / "target"), served="tiny").check()
    msg = str(e.value)
    assert msg.startswith(f"tokenizer={TINY_LLAMA / 'target'} (--model-arg) disagrees with openai:{vllm_server.url}'s tokenizer: 'The capital of France is' is [")
    assert "\n" not in msg


def test_other_weights_behind_the_same_name_change_the_identity(pair, vllm_server, tmp_path):
    """A second server on other weights, served under the same name ``tiny``: another probe,
    so another fingerprint and request-store key (the cache recomputes). The same server
    reached by another URL (as after a restart on another host name) keeps its fingerprint."""
    from ..servers import build_tiny_llama, start_vllm

    _, oa = pair
    same = OpenAIModel(vllm_server.url.replace("127.0.0.1", "localhost"), tokenizer=oa.tokenizer, served="tiny",
                       dtype="float32")
    assert same.fingerprint() == oa.fingerprint()
    other_dir, _ = build_tiny_llama(tmp_path / "other", weights_seed=1)
    other = start_vllm(other_dir, tmp_path, fresh=True)
    try:
        changed = OpenAIModel(other.url, tokenizer=oa.tokenizer, served="tiny", dtype="float32").check()
        assert changed.server_identity()["served_model"] == "tiny"
        assert changed.server_identity()["probe"] != oa.server_identity()["probe"]
        assert changed.fingerprint() != oa.fingerprint()
        assert changed.identity().digest() != oa.identity().digest()
    finally:
        other.stop()
