"""Shared test set-up: offline hub, one torch thread, a fresh cache dir per test."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tempfile  # noqa: E402

import pytest  # noqa: E402

# Keep every test off the user's real cache (the model file-hash memo lives there too).
os.environ.setdefault("EVALDAG_CACHE_DIR", tempfile.mkdtemp(prefix="evaldag-test-cache-"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("EVALDAG_CACHE_DIR", str(d))
    return d
