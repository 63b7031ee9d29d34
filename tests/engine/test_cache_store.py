"""The store: lossless pickle-free entries, corruption, kills, concurrent processes."""

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine import Cache, Result, metric, run
from evaldag.engine.cache import CorruptEntryWarning
from evaldag.engine.cache.codec import pack, unpack

WORKER = Path(__file__).parents[1] / "engine_graph_worker.py"


def test_entries_round_trip_without_loss(tmp_path):
    value = {
        "r": Result(float("nan"), {"0": {"p": 0.5}}, extra={"auc": 1.0}, reason="no items"),
        "arr": np.arange(12, dtype=np.float32).reshape(3, 4),
        "ints": np.array([1, -2], dtype=np.int64),
        "t": (1, "a", None, True, float("inf"), -0.0),
        "nested": [{"x": np.zeros(0, dtype=np.float16)}],
    }
    back, meta = unpack(pack(value, {"m": 1}))
    assert meta == {"m": 1}
    assert math.isnan(back["r"].agg_value) and back["r"].reason == "no items" and back["r"].extra == {"auc": 1.0}
    assert back["arr"].dtype == np.float32 and np.array_equal(back["arr"], value["arr"])
    assert back["t"] == (1, "a", None, True, float("inf"), -0.0) and isinstance(back["t"], tuple)
    assert back["nested"][0]["x"].dtype == np.float16


def test_store_refuses_what_it_cannot_hold_without_pickle(tmp_path):
    from evaldag.engine.cache import EncodeError

    with pytest.raises(EncodeError, match="no pickle"):
        Cache(tmp_path).nodes.put("ab" * 32, {"f": object()}, {})


@metric("s_val", version="1", register=False)
def s_val():
    return {"r": Result(3.5, {"0": {"x": 1.0}}), "a": np.arange(100.0)}


def test_corrupt_entry_is_detected_recomputed_and_warned(tmp_path):
    first = run([s_val(name="v")], {}, cache_dir=tmp_path)
    path = first.cache.nodes.path(first.record("v").fingerprint)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # flip bits inside the payload
    path.write_bytes(bytes(data))
    with pytest.warns(CorruptEntryWarning, match="checksum mismatch"):
        second = run([s_val(name="v")], {}, cache_dir=tmp_path)
    assert second.record("v").status == "computed" and second.record("v").reason == "corrupt-entry"
    assert second["v"]["r"].agg_value == 3.5
    path.write_bytes(path.read_bytes()[:20])  # truncated
    with pytest.warns(CorruptEntryWarning, match="unreadable"):
        third = run([s_val(name="v")], {}, cache_dir=tmp_path)
    assert third.record("v").status == "computed" and third["v"]["r"].agg_value == 3.5
    assert Cache(tmp_path).verify() == []


def _log(markers):
    p = Path(markers) / "computed.log"
    return p.read_text().split("\n")[:-1] if p.exists() else []


def _worker(cache, markers, sleep, *extra):
    return [sys.executable, str(WORKER), str(cache), str(markers), str(sleep), *map(str, extra)]


def test_killed_run_resumes_without_recomputing_finished_nodes(tmp_path):
    cache, markers = tmp_path / "cache", tmp_path / "m"
    markers.mkdir()
    proc = subprocess.Popen(_worker(cache, markers, 1.0), stdout=subprocess.PIPE)
    deadline = time.time() + 60
    while len(_log(markers)) < 3 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stored = _stored_nodes(cache)
    assert 2 <= len(stored) < 7, stored
    n_logged = len(_log(markers))
    out = subprocess.run(_worker(cache, markers, 0.0), capture_output=True, text=True, check=True)
    resumed = json.loads(out.stdout)
    recomputed = {line.split()[0] for line in _log(markers)[n_logged:]}
    # finished nodes were stored the moment they finished: only the rest ran again
    assert not recomputed & stored
    assert recomputed | stored == {f"leaf{i}" for i in range(6)} | {"total"}
    assert resumed["computed"] == 7 - len(stored) and resumed["cached"] == len(stored)
    fresh = json.loads(subprocess.run(_worker(tmp_path / "fresh", markers, 0.0), capture_output=True, text=True, check=True).stdout)
    assert resumed["total"] == fresh["total"] == sum(range(6))
    assert Cache(cache).verify() == []


def _stored_nodes(cache):
    store = Cache(cache).nodes
    return {store.get(p.stem).meta["node"] for p in store.entries()}


def test_two_processes_share_one_cache(tmp_path):
    cache, markers = tmp_path / "cache", tmp_path / "m"
    markers.mkdir()
    procs = [subprocess.Popen(_worker(cache, markers, 0.2), stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0]["total"] == outs[1]["total"] == 15.0
    names = [line.split()[0] for line in _log(markers)]
    assert sorted(names) == sorted(set(names)), f"a node was computed twice: {names}"
    assert len(names) == 7
    assert outs[0]["computed"] + outs[1]["computed"] == 7
    assert Cache(cache).verify() == []
