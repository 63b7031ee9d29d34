"""Cache trust: a stale file hash, forged and misplaced entries, links, temporaries,
outputs written as one set, failures that always print, request keys by device."""

import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from evaldag.engine import Cache, Result, cli, metric, run
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine.cache import CorruptEntryWarning, LinkWarning
from evaldag.engine.cache.codec import pack, unpack
from evaldag.engine.cache.files import TMP_PREFIX
from evaldag.engine.executor import Executor

from ..golden_runs import FIX, TINY
from .test_cli import third_party  # noqa: F401 - the third-party benchmark fixture

EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def _tofu(model, out, cache, *extra):
    argv = ["run", "tofu", "--model", str(model), "--data", str(FIX / "tofu_tiny"), "--metrics", "forget_Q_A_Prob",
            "--quiet", "--out", str(out), "--cache-dir", str(cache), *extra]
    assert cli.main(argv) == 0
    return json.loads((out / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]


def test_a_swapped_checkpoint_with_its_mtime_set_back_is_hashed_again(tmp_path):
    cache = tmp_path / "cache"
    retain = _tofu(TINY / "retain", tmp_path / "retain", cache)
    model = tmp_path / "model"
    shutil.copytree(TINY / "target", model)
    target = _tofu(model, tmp_path / "t1", cache)
    assert target["agg_value"] != retain["agg_value"]
    weights = model / "model.safetensors"
    st = os.stat(weights)
    shutil.copyfile(TINY / "retain" / "model.safetensors", weights)  # same size, other weights
    assert os.stat(weights).st_size == st.st_size
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))  # `touch -r`: the mtime is as before
    swapped = _tofu(model, tmp_path / "t2", cache)
    assert swapped == retain  # the retain model's numbers (its nodes, found by the new fingerprint)
    memo = json.loads(Cache(cache).filehash.path.read_text())
    assert memo[str(weights.resolve())]["ctime_ns"] == os.stat(weights).st_ctime_ns


def test_rehash_ignores_the_memo(tmp_path):
    memo = Cache(tmp_path / "c").filehash
    weights = TINY / "target" / "model.safetensors"
    first = memo.sha256(weights)
    rec = json.loads(memo.path.read_text())
    rec[str(weights.resolve())]["sha256"] = "0" * 64  # a forged memo record
    memo.path.write_text(json.dumps(rec))
    assert memo.sha256(weights) == "0" * 64
    assert Cache(tmp_path / "c", rehash=True).filehash.sha256(weights) == first


@metric("trust_base", version="1")
def base():
    return Result(2.0, {"0": 1.0, "1": 3.0})


@metric("trust_double", version="1", parents={"b": base})
def double(b):
    return Result(b.agg_value * 2, {k: v * 2 for k, v in b.value_by_index.items()})


@metric("trust_other", version="1", parents={"b": base})
def other(b):
    return Result(-1.0)


def _forge(path, change):
    value, meta = unpack(path.read_bytes())
    path.write_bytes(pack(change(value), meta))  # a recomputed checksum: intact by every local check


def test_a_forged_entry_passes_verify_but_not_verify_deep(tmp_path, capsys):
    res = run([double(name="d")], {}, cache_dir=tmp_path)
    path = res.cache.nodes.path(res.record("d").fingerprint)
    _forge(path, lambda v: Result(0.987654321, v.value_by_index))
    assert run([double(name="d")], {}, cache_dir=tmp_path)["d"].agg_value == 0.987654321  # not authenticated
    assert cli.main(["cache", "verify", "--cache-dir", str(tmp_path)]) == 0
    assert cli.main(["cache", "verify", "--deep", "--cache-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"differs: {path}" in out and "deep: 2 recomputed, 1 differ" in out


def test_a_misplaced_entry_is_refused_and_recomputed(tmp_path):
    res = run([double(name="d"), other(name="o")], {}, cache_dir=tmp_path)
    d, o = (res.cache.nodes.path(res.record(n).fingerprint) for n in ("d", "o"))
    shutil.copyfile(d, o)  # d's entry under o's name
    assert any("misplaced" in b for b in Cache(tmp_path).verify())
    with pytest.warns(CorruptEntryWarning, match="misplaced"):
        again = run([double(name="d"), other(name="o")], {}, cache_dir=tmp_path)
    assert again["o"].agg_value == -1.0 and again.record("o").reason == "corrupt-entry"
    assert again.record("d").status == "cached"


def test_a_value_of_the_wrong_type_is_refused(tmp_path):
    res = run([double(name="d")], {}, cache_dir=tmp_path)
    path = res.cache.nodes.path(res.record("d").fingerprint)
    _forge(path, lambda v: {"agg_value": 5.0})  # type recorded as Result, value now a dict
    with pytest.warns(CorruptEntryWarning, match="recorded as Result"):
        assert run([double(name="d")], {}, cache_dir=tmp_path)["d"].agg_value == 4.0


def test_links_inside_the_cache_are_never_followed(tmp_path):
    cache = tmp_path / "cache"
    res = run([double(name="d")], {}, cache_dir=cache)
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "model.safetensors"
    precious.write_bytes(b"weights")
    old = time.time() - 10 * 86400
    os.utime(precious, (old, old))
    (cache / "objects" / "zz").symlink_to(outside, target_is_directory=True)
    with pytest.warns(LinkWarning, match="zz"):
        assert cli.main(["cache", "prune", "--older-than", "1s", "--cache-dir", str(cache)]) == 0
    assert precious.read_bytes() == b"weights"

    # an objects/<ab> link receives no entries; a request database that is a link is not opened
    fp = res.record("d").fingerprint
    shutil.rmtree(cache / "objects" / fp[:2])
    (cache / "objects" / fp[:2]).symlink_to(outside, target_is_directory=True)
    empty = outside / "empty.db"
    empty.write_bytes(b"")
    (cache / "requests.sqlite").symlink_to(empty)
    with pytest.warns(LinkWarning):
        again = run([double(name="d"), _scored()], {"model": ToyModel(), "data": [{"t": "ab"}]}, cache_dir=cache)
    assert again["d"].agg_value == 4.0 and again.ok
    assert sorted(p.name for p in outside.iterdir()) == ["empty.db", "model.safetensors"] and empty.read_bytes() == b""
    assert cli.main(["cache", "clear", "--yes", "--cache-dir", str(cache)]) == 0
    assert precious.read_bytes() == b"weights" and empty.read_bytes() == b""
    assert sorted(p.name for p in outside.iterdir()) == ["empty.db", "model.safetensors"]
    assert not list((cache / "history").glob("*.json"))  # the cache's own files went; the links stay, unfollowed


def _scored():
    from evaldag.engine import TokenStats

    @metric("trust_scored", version="1", needs=("model", "data"), register=False)
    def scored(model, data):
        ids = model.encoder().encode(data[0]["t"])
        (res,) = yield [TokenStats(tuple(ids[:1]), tuple(ids[1:]))]
        return Result(float(res.logprob.sum()))

    return scored(name="s")


def test_orphan_temporaries_are_not_entries_and_are_swept(tmp_path, capsys):
    res = run([double(name="d")], {}, cache_dir=tmp_path)
    folder = res.cache.nodes.path(res.record("d").fingerprint).parent
    orphan = folder / f"{TMP_PREFIX}killed.safetensors"
    orphan.write_bytes(b"\x10\x00\x00\x00trunc")  # a kill between write and rename
    old = time.time() - 2 * 3600
    os.utime(orphan, (old, old))
    young = folder / f"{TMP_PREFIX}live.safetensors"
    young.write_bytes(b"being written")
    assert cli.main(["cache", "verify", "--cache-dir", str(tmp_path)]) == 0
    assert cli.main(["cache", "info", "--cache-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out.split("entries, 0 corrupt\n")[1])["nodes"] == 2
    run([double(name="d")], {}, cache_dir=tmp_path)  # opening the cache for a run sweeps old temporaries
    assert not orphan.exists() and young.exists()


def test_four_concurrent_writers_of_one_out_folder(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    cmd = [EVALDAG, "run", "toy", "--quiet", "--out", str(out), "--cache-dir", str(cache)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert [code for code, _ in results] == [0, 0, 0, 0], results
    assert sorted(p.name for p in out.iterdir() if p.name != ".evaldag") == ["TOY_EVAL.json", "TOY_SUMMARY.json", "report.html", "run.json"]
    summary = json.loads((out / "TOY_SUMMARY.json").read_text())
    assert summary["toy_probability"] == json.loads((out / "TOY_EVAL.json").read_text())["toy_probability"]["agg_value"]


def test_quiet_still_prints_failures_root_cause_first(third_party, tmp_path):
    cmd = [EVALDAG, "run", "thirdbench", "--metrics", "count,fails", "--quiet", "--out", str(tmp_path / "o"),
           "--cache-dir", str(tmp_path / "c")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=third_party)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[0] == "FAILED fails: RuntimeError: this metric always fails"
    assert "Traceback" in done.stderr  # the traceback follows, indented


def test_request_results_are_keyed_by_device_and_execution_mode(tmp_path):
    cpu, cuda = HFModel(TINY / "target", device="cpu"), HFModel(TINY / "target", device="cuda")
    ex, det = Executor(), Executor(deterministic=True)
    assert ex.store_key(cpu, "f") == "f@cpu" and ex.store_key(cuda, "f") == "f@cuda" and det.store_key(cpu, "f") == "f@cpu+det"
    nodes = lambda: [_scored()]  # noqa: E731
    batched = run(nodes(), {"model": ToyModel(), "data": [{"t": "abc"}]}, cache_dir=tmp_path)
    alone = run(nodes(), {"model": ToyModel(), "data": [{"t": "abc"}]}, cache_dir=tmp_path, deterministic=True)
    assert alone.record("s").status == "computed" and alone.record("s").fingerprint != batched.record("s").fingerprint
    assert alone.executor["batches"] == alone.executor["sequences_forwarded"]
    assert json.loads(json.dumps(alone.provenance["execution"])) == {"deterministic": True, "batch_tokens": None,
                                                                         "prefix_sharing": False}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run(nodes(), {"model": ToyModel(), "data": [{"t": "abc"}]}, cache_dir=tmp_path, deterministic=True).record("s").status == "cached"
