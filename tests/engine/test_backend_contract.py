"""The backend contract (engine/backend.py): a third party writes two methods and the
executor serves it; the executor owns the one batch budget; plugins add request kinds;
the request-cache keys of hf: models did not move."""

import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine import backend as backend_module, executor as executor_module
from evaldag.engine.adapters import spec
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.adapters.hf.hf_adapter import HFAdapter
from evaldag.engine.adapters.hf import hf_backend
from evaldag.engine.adapters.openai import openai_model
from evaldag.engine.adapters.vllm import vllm_lora
from evaldag.engine.backend import (Capabilities, Identity, ModelAdapter, ModelResource, OutOfMemory, backend_factory,
                                    register_backend)
from evaldag.engine.batching import Budget
from evaldag.engine.cache import Cache
from evaldag.engine.executor import Executor
from evaldag.engine.requests import (REQUEST_TYPES, RESULT_TYPES, Generate, GenerationSettings, Request, TokenStats,
                                     TokenStatsResult, register_kind)

from ..conftest_models import model, tokenizer

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-llama"


class Minimal(ModelAdapter):
    """Only what a backend must write: capabilities and run_batch."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def capabilities(self) -> Capabilities:
        return Capabilities({"token_stats"}, {"logprob"})

    def run_batch(self, requests):
        self.sizes.append(len(requests))
        nan = lambda r: np.full(len(r.continuation_ids), np.nan, np.float32)  # noqa: E731
        return [TokenStatsResult(np.full(len(r.continuation_ids), -len(r.context_ids), np.float32),
                                 np.zeros(len(r.continuation_ids), np.int32), nan(r), nan(r)) for r in requests]


class MinimalModel(ModelResource):
    backend = "minimal"

    def __init__(self, adapter: ModelAdapter | None = None):
        self.adapter = adapter or Minimal()
        self.loads = 0

    def fingerprint(self) -> str:
        return "minimal-weights"

    def capabilities(self) -> Capabilities:
        return self.adapter.capabilities()

    def encoder(self):
        raise AssertionError("the executor never asks for an encoder")

    def load(self) -> ModelAdapter:
        self.loads += 1
        return self.adapter


def test_executor_calls_no_undeclared_member():
    src = inspect.getsource(executor_module)
    assert "hasattr" not in src and "getattr(adapter" not in src and "getattr(model" not in src


def test_a_minimal_third_party_backend_is_served_and_cached(tmp_path):
    cache = Cache(tmp_path / "c")
    m = MinimalModel()
    reqs = [TokenStats((1,) * n, (2, 3)) for n in (1, 4, 2, 4)]
    got = Executor(cache=cache.requests).serve([(m, r) for r in reqs])
    assert [g.logprob.tolist() for g in got] == [[-1, -1], [-4, -4], [-2, -2], [-4, -4]]
    assert m.loads == 1 and m.adapter.sizes == [3]  # duplicates dropped, one batch
    # the key: fingerprint, the identity's digest (backend and details), the device
    digest = hashlib.sha256(json.dumps(["minimal", []], separators=(",", ":")).encode()).hexdigest()[:16]
    ex = Executor(cache=cache.requests)
    assert ex.store_key(m, Executor.model_key(m)) == f"minimal-weights~minimal-{digest}@cpu"
    again = MinimalModel()
    warm = ex.serve([(again, r) for r in reqs])
    assert again.loads == 0 and [g.logprob.tolist() for g in warm] == [[-1, -1], [-4, -4], [-2, -2], [-4, -4]]
    row = cache.requests.path
    assert row.exists()


class Tight(Minimal):
    """Out of memory above 20 padded tokens; records every budget the executor hands it."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[int] = []

    def group_budget(self, kind: str, budget: Budget) -> Budget:
        self.given.append(budget.tokens)
        return budget

    def run_batch(self, requests):
        if self.batch_cost(requests) > 20:
            raise OutOfMemory("too big")
        return super().run_batch(requests)


def test_out_of_memory_halves_the_executors_one_budget():
    m = MinimalModel(Tight())
    ex = Executor(batch_tokens=64)
    got = ex.serve([(m, TokenStats((i,) * 6, (9, 9))) for i in range(8)])  # 8 rows of 8 tokens
    assert len(got) == 8
    # 64 tokens: a batch of 8 (64) fails -> 32, its half of 4 (32) fails -> 16: batches of 2
    assert ex._budgets[(Executor.model_key(m), "token_stats")] == Budget(16, 32)
    assert m.adapter.given == [64, 32, 16] and m.adapter.sizes == [2, 2, 2, 2]
    assert ex.stats.summary()["oom_retries"] == 2


def test_hf_adapter_keeps_no_budget_copy_of_its_own(monkeypatch):
    adapter = HFAdapter(model("llama"), tokenizer())
    given = Budget(400, 8)
    adapter.group_budget("generate", given)

    def boom(reqs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(adapter, "_generate", boom)
    with pytest.raises(OutOfMemory):
        adapter.run_batch([Generate((1, 2), GenerationSettings(max_new_tokens=2))])
    assert adapter._generate_budget == given  # the executor halves; the adapter keeps what it was given


# ----------------------------------------------------------------------------- a plugin's request kind


@dataclass(frozen=True)
class Reverse(Request):
    ids: tuple[int, ...]
    kind = "test_reverse"

    def length(self) -> int:
        return len(self.ids)


@dataclass
class ReverseResult:
    ids: np.ndarray

    def to_arrays(self) -> dict:
        return {"ids": self.ids}

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "ReverseResult":
        return cls(arrays["ids"])


@pytest.fixture()
def reverse_kind():
    """The kind and its HF handler, registered as a plugin module would on import; removed after."""
    register_kind(Reverse, ReverseResult)
    HFAdapter.handlers.add("test_reverse", lambda adapter, reqs: [ReverseResult(np.asarray(r.ids[::-1])) for r in reqs])
    yield
    HFAdapter.handlers.remove("test_reverse")
    REQUEST_TYPES.pop("test_reverse")
    RESULT_TYPES.pop("test_reverse")


def test_a_plugin_kind_is_served_by_hf_and_read_back_from_the_cache(reverse_kind, tmp_path):
    res = HFModel.from_pretrained_objects(model("llama"), tokenizer(), name="tiny")
    assert "test_reverse" in res.capabilities().kinds  # known before any weights load
    cache = Cache(tmp_path / "c")
    got = Executor(cache=cache.requests).serve([(res, Reverse((1, 2, 3))), (res, Reverse((4, 5)))])
    assert [g.ids.tolist() for g in got] == [[3, 2, 1], [5, 4]]
    fresh = HFModel.from_pretrained_objects(model("llama"), tokenizer(), name="tiny")
    warm = Executor(cache=cache.requests)
    again = warm.serve([(fresh, Reverse((1, 2, 3)))])
    assert isinstance(again[0], ReverseResult) and again[0].ids.tolist() == [3, 2, 1]
    assert warm.stats.models_loaded == []  # found through the kind registry, not computed


def test_a_kind_must_be_registered_before_a_handler(monkeypatch):
    with pytest.raises(KeyError, match="unknown request kind 'nope'"):
        HFAdapter.handlers.add("nope", lambda a, r: r)


# ----------------------------------------------------------------------------- entry points, identity


def test_backends_are_found_by_scheme():
    assert backend_factory("hf") is hf_backend.from_spec
    assert backend_factory("toy")("5").seed == 5
    register_backend("mini", lambda target: MinimalModel())
    assert isinstance(backend_factory("mini")("x"), MinimalModel)
    with pytest.raises(KeyError, match="unknown model backend 'nosuch'; installed: .*hf"):
        backend_factory("nosuch")


def test_entry_points_naming_modules_that_moved_still_find_the_built_in_backends(tmp_path, monkeypatch):
    """An environment installed before the backends moved into their folders keeps entry points
    naming the old modules until it is reinstalled: the built-in schemes still resolve there,
    while a third-party backend whose module is missing still says so."""
    dist = tmp_path / "evaldag-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evaldag\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(
        "[evaldag.backends]\nhf = evaldag.engine.adapters.hf_backend:from_spec\n"
        "openai = evaldag.engine.adapters.openai_model:from_spec\ntoy = evaldag.engine.adapters.toy:from_spec\n"
        "vllm = evaldag.engine.adapters.vllm_lora:from_spec\nother = evaldag_no_such_plugin:from_spec\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(backend_module, "_FACTORIES", {})
    assert spec.scheme_factory("hf") is hf_backend.from_spec
    assert spec.scheme_factory("vllm") is vllm_lora.from_spec
    assert spec.scheme_factory("openai") is openai_model.from_spec
    assert spec.scheme_factory("toy")("5").seed == 5
    with pytest.raises(ModuleNotFoundError, match="evaldag_no_such_plugin"):
        spec.scheme_factory("other")


def test_hf_request_keys_did_not_move():
    """Keys computed on main before backends had identities: existing caches stay warm."""
    m = HFModel(TINY / "target", device="cpu", dtype="fp32")
    fp = Executor.model_key(m)
    assert m.identity() == Identity("hf", "cpu", in_fingerprint=True) and fp == m.fingerprint()
    assert Executor().store_key(m, fp) == "23d022ce3a634f2a94927da78bc6742c8753d24c2934d142ca5ab9a764759bff@cpu"
    assert Executor(deterministic=True).store_key(m, fp).endswith("@cpu+det")
    assert TokenStats((1, 2, 3), (4, 5)).key() == "d47a7a5f988ceb0fe2e4be9ae87c180e251743e7f771bbb4cb28c038cb0ede71"
    assert Generate((1, 2), GenerationSettings(max_new_tokens=5)).key() == (
        "294d13cc3cf9c37ef94e3282e9108b13f58747db29c557db41b68ebad29b7830")


def test_capabilities_say_what_is_missing_in_words():
    import evaldag.metrics.unlearning.grad_request  # noqa: F401 - a family's kind names itself ("gradients")

    server = Capabilities({"token_stats", "generate"}, {"logprob", "argmax"})
    assert server.missing("token_stats", {"logprob"}) is None
    assert server.missing("token_stats", {"logprob", "mu", "var"}) == "full-vocabulary log-prob statistics"
    assert server.missing("grad_norm") == "gradients" and server.missing("hidden_states") == "hidden states"
    with pytest.raises(ValueError, match="unknown token-statistic fields"):
        Capabilities({"token_stats"}, {"entropy"})


def test_text_backends_take_text_not_fake_ids():
    from evaldag.benchmarks.probes.generators import CallableModel
    from evaldag.engine.requests import GenerateText

    m = CallableModel(lambda texts: [t.upper() for t in texts], name="upper")
    assert m.capabilities() == Capabilities({"generate_text"})
    with pytest.raises(NotImplementedError, match="a text backend has no tokenizer"):
        m.encoder()
    got = Executor().serve([(m, GenerateText("héllo ✓", GenerationSettings(max_new_tokens=3)))])
    assert got[0].text == "HÉLLO ✓" and got[0].token_ids.size == 0
    # a scorer that builds ids for a tokenizer backend and text for a text backend declares both
    assert m.capabilities().missing("generate|generate_text") is None
    assert m.capabilities().missing("generate") == "generation"
