"""Shared test set-up: offline hub, one torch thread, a fresh cache dir per test."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import atexit  # noqa: E402
import importlib.util  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

# pytest-xdist starts its workers with SIGINT ignored (the controller owns Ctrl-C), and an ignored
# signal stays ignored in every process they start: the tests that interrupt a run (in-process or
# a child `evaldag`) need Python's own handler, as a user's terminal gives it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Keep every test off the user's real cache (the model file-hash memo lives there too).
if "EVALDAG_CACHE_DIR" not in os.environ:
    _session_cache = tempfile.mkdtemp(prefix="evaldag-test-cache-")
    os.environ["EVALDAG_CACHE_DIR"] = _session_cache
    atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("EVALDAG_CACHE_DIR", str(d))
    return d


# The real-server fixtures (vLLM, transformers serve, their model), defined once here so that
# a session starts each server once for every test module that uses it.
from tests.servers import serve_server, server_model, vllm_server  # noqa: E402,F401
# The real-model tier's one loaded model (SmolLM2-135M-Instruct's GGUF), shared by its tests.
from tests.realmodel import smollm  # noqa: E402,F401


# Under `pytest -n N --dist loadfile` (the README's command) each worker starts the session
# servers its modules need: the three modules that talk to the vLLM server go to one worker
# together, so that server starts once per run (50-70 s of CPU here), not once per worker.
_ONE_WORKER = {f"tests/engine/test_{name}.py": "vllm-server" for name in ("openai_cli", "openai_fidelity", "openai_vllm",
                                                                          "fallback_proof")}
# and the real-model tier's modules share one worker, so its model is dequantized once per run
_ONE_WORKER.update({f"tests/engine/{name}.py": "realmodel" for name in ("test_realmodel", "test_grad_norm_real_model",
                                                                                   "test_prefix_sharing_real_model")})

if importlib.util.find_spec("xdist") is not None:
    def pytest_xdist_make_scheduler(config, log):
        if config.getoption("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        class SharedServers(LoadFileScheduling):
            def _split_scope(self, nodeid: str) -> str:
                scope = super()._split_scope(nodeid)
                return _ONE_WORKER.get(scope, scope)

        return SharedServers(config, log)


# Longest first: under --dist loadfile the workers take modules in collection order, so a
# two-minute module collected last leaves the other worker idle at the end. These modules,
# measured the slowest (2026-11-24 and 2026-11-27, `--durations`), are collected first, in this
# order; the rest keep theirs. Only inside xdist workers (every worker sorts alike); a plain run
# is unchanged.
_SLOWEST_FIRST = ("test_vllm_backend.py", "test_vllm_torchrun.py", "test_openai_vllm.py", "test_fallback_proof.py",
                  "test_sigterm_inside_stages.py", "test_realmodel.py", "test_openai_cli.py", "test_openai_fidelity.py",
                  "test_distributed.py", "test_editing_rome.py", "test_cli_messages.py", "test_demo_assets.py",
                  "test_integrations_fsdp.py", "test_docs_benchmark_plugin.py", "test_editing_tracer.py",
                  "test_sweep_parallel.py", "test_deep_graphs.py", "test_compare_paired.py")


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: i for i, name in enumerate(_SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order within a module kept
