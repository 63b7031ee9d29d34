"""The executor: dedupe, cache before load, budget packing, OOM back-off, scatter, stats."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from evaldag.engine import batching
from evaldag.engine.adapters.base import OutOfMemory, PromptTemplate
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.executor import Executor
from evaldag.engine.cache import RequestStore
from evaldag.engine.requests import Generate, GenerationSettings, TokenStats

from ..conftest_models import TINY_LLAMA, CountingModel, one_thread, resource, tofu_rows

pytest.importorskip("torch")
one_thread()


def qa_requests(n_unique: int, repeat_share: float = 0.3, seed: int = 0) -> list[TokenStats]:
    """``n_unique`` distinct requests plus ``repeat_share`` repeats, shuffled."""
    enc = resource("llama").encoder()
    rows = tofu_rows("forget10_perturbed") + tofu_rows("retain_perturbed")
    uniq = []
    for r in rows[:n_unique]:
        e = enc.encode_qa(r["question"], r["answer"], PromptTemplate.plain())
        uniq.append(TokenStats(e.context_ids, e.continuation_ids))
    rng = random.Random(seed)
    reqs = uniq + [rng.choice(uniq) for _ in range(round(n_unique * repeat_share / (1 - repeat_share)))]
    rng.shuffle(reqs)
    return reqs


def assert_same_stats(a, b, atol=1e-5):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.logprob, y.logprob, atol=atol, rtol=0)
        np.testing.assert_array_equal(x.argmax, y.argmax)


# ---------------------------------------------------------------------------- planning


def test_pack_respects_the_budget_and_sorts_longest_first():
    lengths = [random.Random(1).randint(5, 300) for _ in range(200)] + [5000]
    budget = batching.Budget(tokens=1024, max_batch=8)
    batches = batching.pack(list(range(len(lengths))), lambda i: lengths[i], budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # each item exactly once
    assert batches[0] == [200]  # longer than the budget: runs alone, and first
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat, reverse=True)
    for b in batches:
        assert len(b) <= 8
        assert len(b) == 1 or batching.padded_tokens(b, lambda i: lengths[i]) <= 1024
    assert batching.halve([1, 2, 3]) == [[1, 2], [3]]
    with pytest.raises(ValueError):
        batching.halve([1])


def test_default_budgets():
    assert batching.default_budget("cpu") == batching.Budget(4096, 32)
    assert batching.default_budget("cpu", batch_tokens=512).tokens == 512
    gpu = batching.default_budget("cuda", hint={"free_bytes": 40 << 30, "bytes_per_token": 500_000})
    assert gpu.tokens == int(0.5 * (40 << 30) / 500_000)
    assert batching.default_budget("cuda:1", hint={"free_bytes": 1, "bytes_per_token": 1 << 20}).tokens == 2048


# ------------------------------------------------------------------------- serving


def test_duplicates_are_forwarded_once_and_scattered_to_every_asker():
    reqs = qa_requests(28)
    assert len(reqs) == 40
    m = resource("llama")
    ex = Executor()
    got = ex.serve([(m, r) for r in reqs])
    s = ex.stats.summary()
    assert s["requests"] == 40 and s["unique"] == 28 and s["sequences_forwarded"] == 28
    assert s["by_kind"]["token_stats"]["sequences_forwarded"] == 28 and s["generations"] == 0
    lengths = [r.length() for r in set(reqs)]
    assert s["tokens_real"] == sum(lengths)
    assert s["batches"] == 1 and s["tokens_padded"] == 28 * max(lengths)  # 28 rows fit the cpu budget
    assert s["padding_fraction"] == pytest.approx(1 - sum(lengths) / (28 * max(lengths)))
    direct = m.load()
    assert_same_stats(got, [direct.run_batch([r])[0] for r in reqs])


def test_a_warm_rerun_forwards_nothing_and_never_loads_the_model(tmp_path):
    reqs = qa_requests(20)
    cold = Executor(cache=RequestStore(tmp_path))
    first = cold.serve([(resource("llama"), r) for r in reqs])
    assert cold.stats.summary()["sequences_forwarded"] == 20
    counting = CountingModel(resource("llama"))
    warm = Executor(cache=RequestStore(tmp_path))
    again = warm.serve([(counting, r) for r in reqs])
    s = warm.stats.summary()
    assert counting.load_calls == 0 and counting.encoder_calls == 0
    assert s["sequences_forwarded"] == 0 and s["cached"] == 20 and s["model_loaded"] is False
    assert_same_stats(first, again, atol=0)
    # another model is another cache key: nothing is served from the first model's rows
    other = CountingModel(resource("llama", seed=1))
    Executor(cache=RequestStore(tmp_path)).serve([(other, r) for r in reqs[:3]])
    assert other.load_calls == 1


WARM_RUN = textwrap.dedent("""
    import json, sys
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.executor import Executor
    from evaldag.engine.cache import RequestStore
    from evaldag.engine.requests import TokenStats

    reqs = [TokenStats(tuple(c), tuple(x)) for c, x in json.loads(sys.argv[1])]
    ex = Executor(cache=RequestStore(sys.argv[2]))
    out = ex.serve([(HFModel(sys.argv[3]), r) for r in reqs])
    assert ex.stats.summary()["cached"] == len(reqs), ex.stats.summary()
    print(json.dumps([float(o.logprob.sum()) for o in out]))
    print(json.dumps(sorted(m for m in ("torch", "transformers", "tokenizers") if m in sys.modules)))
""")


def test_a_warm_rerun_of_a_checkpoint_imports_neither_torch_nor_transformers(tmp_path, cache_dir):
    path = TINY_LLAMA / "target"
    m = HFModel(path)  # dtype auto on a float32 checkpoint: the fingerprint needs no torch
    enc = m.encoder()
    pairs = [enc.encode_qa(r["question"], r["answer"], PromptTemplate.plain()) for r in tofu_rows()[:3]]
    reqs = [TokenStats(e.context_ids, e.continuation_ids) for e in pairs]
    cold = Executor(cache=RequestStore(tmp_path)).serve([(m, r) for r in reqs])
    arg = json.dumps([[list(r.context_ids), list(r.continuation_ids)] for r in reqs])
    proc = subprocess.run([sys.executable, "-c", WARM_RUN, arg, str(tmp_path), str(path)],
                          capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert proc.returncode == 0, proc.stderr
    sums, imported = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert imported == []
    assert sums == [float(c.logprob.sum()) for c in cold]


def test_out_of_memory_on_the_first_batch_is_halved_and_retried():
    reqs = qa_requests(28, repeat_share=0.0)
    m = resource("llama")
    baseline = Executor(batch_tokens=2048)
    want = baseline.serve([(m, r) for r in reqs])
    calls = []

    def fault(kind, batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise OutOfMemory("injected")

    ex = Executor(batch_tokens=2048, fault=fault)
    got = ex.serve([(m, r) for r in reqs])
    s = ex.stats.summary()
    assert s["oom_retries"] >= 1 and s["sequences_forwarded"] == 28
    assert calls[1] == (calls[0] + 1) // 2  # the failed batch came back halved
    assert s["batches"] > baseline.stats.summary()["batches"]
    assert_same_stats(got, want)


def test_a_single_request_that_does_not_fit_is_a_clear_error():
    def fault(kind, batch):
        raise OutOfMemory("injected")

    with pytest.raises(RuntimeError, match="single token_stats request of .* tokens does not fit"):
        Executor(fault=fault).serve([(resource("llama"), r) for r in qa_requests(3, repeat_share=0.0)])


def test_finished_batches_are_cached_before_a_later_batch_fails(tmp_path):
    reqs = qa_requests(12, repeat_share=0.0)
    seen = []

    def fault(kind, batch):
        seen.append(len(batch))
        if len(seen) == 2:
            raise KeyboardInterrupt  # the run is killed while the second batch is in flight

    cache = RequestStore(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        Executor(cache=cache, batch_tokens=300, fault=fault).serve([(resource("llama"), r) for r in reqs])
    assert cache.count() == seen[0] > 0
    rerun = Executor(cache=RequestStore(tmp_path), batch_tokens=300)
    rerun.serve([(resource("llama"), r) for r in reqs])
    assert rerun.stats.summary()["sequences_forwarded"] == 12 - seen[0]


def test_mixed_kinds_and_models_in_one_serve(capsys):
    stats = qa_requests(6, repeat_share=0.0)
    enc = resource("llama").encoder()
    gens = [Generate(enc.encode_qa(r["question"], r["answer"], PromptTemplate.plain()).prompt_ids,
                     GenerationSettings(max_new_tokens=8)) for r in tofu_rows()[:4]]
    llama, gpt2 = resource("llama"), resource("gpt2")
    work = [(llama, r) for r in stats] + [(gpt2, r) for r in stats] + [(llama, g) for g in gens]
    random.Random(3).shuffle(work)
    ex = Executor(progress=True)
    got = ex.serve(work)
    s = ex.stats.summary()
    assert s["generations"] == 4 and s["by_kind"]["token_stats"]["sequences_forwarded"] == 12
    assert len(ex.stats.models_loaded) == 2
    adapters = {id(llama): llama.load(), id(gpt2): gpt2.load()}
    for (m, r), res in zip(work, got):
        (want,) = adapters[id(m)].run_batch([r])
        if isinstance(r, Generate):
            np.testing.assert_array_equal(res.token_ids, want.token_ids)
        else:
            assert_same_stats([res], [want])
    assert "tok" in capsys.readouterr().err  # the progress bar counts tokens on stderr
