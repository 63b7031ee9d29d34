"""Trained weights in the cache (a relearn's): stored whole, checksummed, and known to every cache command."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from evaldag.engine.cache import Cache, CorruptWeights
from tests.inprocess import run_cli

KEY = "ab" + "c" * 62


def _store(root, key=KEY):
    cache = Cache(root)
    cache.claim()
    src = root.parent / f"scratch-{key[:4]}"
    src.mkdir()
    save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(src / "model.safetensors"))
    (src / "config.json").write_text(json.dumps({"model_type": "llama"}))
    folder = cache.weights.put(key, src, {"transform": "relearn", "params": {"lr": 2e-5, "epochs": 1}, "steps": 3})
    return cache, folder


def test_put_is_whole_and_checked(tmp_path):
    cache, folder = _store(tmp_path / "c")
    assert folder == tmp_path / "c" / "weights" / "ab" / KEY
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "manifest.json", "model.safetensors"]
    assert cache.weights.has(KEY) and cache.weights.checked(KEY) == folder
    assert load_file(str(folder / "model.safetensors"))["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    body = cache.weights.manifest(KEY)
    assert body["steps"] == 3 and body["params"] == {"lr": 2e-5, "epochs": 1} and set(body["files"]) == {
        "config.json", "model.safetensors"}
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 1  # same size, one bit changed: only the sha256 sees it
    (folder / "model.safetensors").write_bytes(bytes(data))
    assert cache.weights.has(KEY)
    with pytest.raises(CorruptWeights, match="model.safetensors: its sha256 is not the manifest's"):
        cache.weights.checked(KEY)
    (folder / "config.json").write_text("{}")  # another size
    assert not cache.weights.has(KEY)


def test_every_cache_command_knows_them(tmp_path):
    root = tmp_path / "c"
    cache, folder = _store(root)
    info = json.loads(run_cli(["cache", "info", "--cache-dir", root]).stdout)
    assert info["weights"] == 1 and info["weight_bytes"] == sum(p.stat().st_size for p in folder.iterdir())
    ls = run_cli(["cache", "ls", "--cache-dir", root]).stdout
    assert f"{KEY[:16]}" in ls and "relearn:epochs=1,lr=2e-05 (3 steps) [weights]" in ls
    ex = run_cli(["cache", "explain", KEY[:10], "--cache-dir", root])
    assert ex.returncode == 0 and json.loads(ex.stdout)["steps"] == 3 and json.loads(ex.stdout)["key"] == KEY
    assert run_cli(["cache", "verify", "--cache-dir", root]).returncode == 0

    other = tmp_path / "d"
    Cache(other).claim()
    merged = run_cli(["cache", "merge", root, "--cache-dir", other])
    assert merged.returncode == 0 and "1 trained-weights folders copied (0 already there)" in merged.stdout
    assert Cache(other).weights.checked(KEY).is_dir()

    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (folder / "model.safetensors").write_bytes(bytes(data))
    bad = run_cli(["cache", "verify", "--cache-dir", root])
    assert bad.returncode == 1 and f"corrupt: {folder / 'model.safetensors'}: its sha256 is not the manifest's" in bad.stdout
    assert run_cli(["cache", "verify", "--repair", "--cache-dir", root]).returncode == 0
    assert not folder.exists()

    _, folder2 = _store(root, "cd" + "e" * 62)
    old = time.time() - 3 * 86400
    os.utime(folder2 / "manifest.json", (old, old))
    pruned = run_cli(["cache", "prune", "--older-than", "1d", "--cache-dir", root])
    assert pruned.returncode == 0 and not folder2.exists()

    cleared = run_cli(["cache", "clear", "--yes", "--cache-dir", other])
    assert cleared.returncode == 0 and not other.exists(), cleared.stdout
