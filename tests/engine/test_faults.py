"""Faults the cache survives: a damaged request database, a full disk, hostile
entries. The deterministic subset of tests/perf/fault_campaign.py, on the toy benchmark."""

import errno
import json
import os
import warnings
from pathlib import Path

import pytest

from evaldag.benchmarks import toy
from evaldag.engine import Cache, cli, run
from evaldag.engine.cache import CacheWriteError, CorruptEntryWarning, DamagedDatabaseWarning
from evaldag.engine.cache import files as cache_files
from evaldag.engine.cache import nodes as cache_nodes
from evaldag.engine.cache.codec import FORMAT


def _values(res):
    return {n: (v.agg_value, v.value_by_index) for n, v in res.results("TOY").items()}


def _baseline(cache):
    res = run(toy.nodes(), toy.resources(), cache_dir=cache)
    res.cache.requests.close()  # checkpoint the WAL into the database file
    return res


def _zero(path, offset, n):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\0" * n)


DAMAGES = {
    "truncate-59%": lambda p: os.truncate(p, int(p.stat().st_size * 0.59)),
    "truncate-95%": lambda p: os.truncate(p, int(p.stat().st_size * 0.95)),
    "zero-page-2": lambda p: _zero(p, 4096, 4096),
    "zero-first-100-bytes": lambda p: _zero(p, 0, 100),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_request_index_is_rebuilt_from_the_batch_files(tmp_path, damage):
    """The per-host SQLite index is an accelerator: damaged, it is deleted with a warning naming it
    and rebuilt from the batch files, so no model answer is lost (nothing is forwarded again). A
    torn last page that SQLite still reads whole is no damage: the same answers, no warning needed."""
    cache = tmp_path / "cache"
    first = _baseline(cache)
    db = Cache(cache).requests.index_path
    DAMAGES[damage](db)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        again = run(toy.nodes(), toy.resources(), cache_dir=cache, force=True)  # force: the scorers ask again
    rebuilt = [str(w.message) for w in seen if issubclass(w.category, DamagedDatabaseWarning)]
    assert (rebuilt != []) == (damage != "truncate-95%") and all(str(db) in w for w in rebuilt)
    assert again.ok and _values(again) == _values(first)
    assert again.executor["sequences_forwarded"] == 0 and again.executor["cached"] == first.executor["unique"] > 0


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_request_batch_file_is_dropped_and_recomputed(tmp_path, damage):
    cache = tmp_path / "cache"
    first = _baseline(cache)
    stored = sorted(cache.glob("requests/*/*.batch"))
    for batch in stored:
        DAMAGES[damage](batch)
    (Cache(cache).requests.index_path).unlink()  # another host: it indexes the files afresh
    with pytest.warns(CorruptEntryWarning, match="do not hash to its name"):
        again = run(toy.nodes(), toy.resources(), cache_dir=cache, force=True)
    assert again.ok and _values(again) == _values(first) and not any(b.exists() for b in stored)
    assert again.executor["cached"] == 0 and again.executor["sequences_forwarded"] == first.executor["sequences_forwarded"]


def test_cache_verify_checks_and_repairs_the_request_batch_files(tmp_path, capsys):
    cache = tmp_path / "cache"
    _baseline(cache)
    first_count = Cache(cache).requests.count()
    assert Cache(cache).info()["requests"] == first_count > 0
    batch = sorted(cache.glob("requests/*/*.batch"))[0]
    DAMAGES["zero-first-100-bytes"](batch)
    before = batch.read_bytes()
    with pytest.warns(CorruptEntryWarning):  # info reads: names the damage, deletes nothing
        assert cli.main(["cache", "info", "--cache-dir", str(cache)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert 0 < info["requests"] < first_count and str(batch) in info["requests_problem"] and batch.read_bytes() == before
    assert cli.main(["cache", "verify", "--cache-dir", str(cache)]) == 1
    assert f"corrupt: {batch}: its bytes do not hash to its name (damaged)" in capsys.readouterr().out
    assert cli.main(["cache", "verify", "--repair", "--cache-dir", str(cache)]) == 0
    assert f"removed {batch}" in capsys.readouterr().out and not batch.exists()
    assert cli.main(["cache", "verify", "--cache-dir", str(cache)]) == 0
    assert 0 < Cache(cache).requests.count() < first_count


def _full_disk_after(monkeypatch, n_writes):
    calls = []

    def fsync(fd):
        calls.append(fd)
        if len(calls) > n_writes:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_files.os, "fsync", fsync)


def test_a_full_cache_disk_stops_with_one_line_and_the_rerun_resumes(tmp_path, monkeypatch, capsys):
    clean = _values(_baseline(tmp_path / "clean"))
    cache, out = tmp_path / "cache", tmp_path / "out"
    argv = ["run", "toy", "--quiet", "--out", str(out), "--cache-dir", str(cache)]
    with monkeypatch.context() as m:
        _full_disk_after(m, 3)
        assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evaldag: error: cannot write ") and "No space left on device" in err[0]
    assert "bytes needed" in err[0]
    assert not [p for p in cache.rglob("*") if p.name.startswith(cache_files.TMP_PREFIX)]
    assert Cache(cache).verify() == []
    stored = len(list(Cache(cache).nodes.entries()))
    assert cli.main(argv) == 0
    nodes = json.loads((out / "run.json").read_text())["nodes"]
    assert sum(n["status"] == "cached" for n in nodes.values()) == stored > 0
    evals = json.loads((out / "TOY_EVAL.json").read_text())
    assert {n: (v["agg_value"], v.get("value_by_index")) for n, v in evals.items()} == clean


def test_a_full_out_disk_keeps_the_old_set_and_no_temporaries(tmp_path, monkeypatch, capsys):
    from evaldag.engine.outputs import files as out_files

    out = tmp_path / "out"
    argv = ["run", "toy", "--quiet", "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    assert cli.main(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    real = out_files._dump
    calls = []

    def dump(path, obj):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, obj)

    monkeypatch.setattr(out_files, "_dump", dump)
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip().startswith(f"evaldag: error: cannot write {out}")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert not [p for p in out.iterdir() if p.name.startswith(cache_files.TMP_PREFIX)]


def _entry_path(res):
    fp = res.graph.find("TOY/toy_summary").fingerprint
    return res.cache.nodes.path(fp)


def _safetensors(header: bytes) -> bytes:
    return len(header).to_bytes(8, "little") + header


HOSTILE = {
    "header-claims-2^60-bytes": lambda: (1 << 60).to_bytes(8, "little") + b"{}",
    "metadata-nested-100000-deep": lambda: _safetensors(json.dumps({"__metadata__": {
        "format": FORMAT, "skeleton": "[" * 100000 + "]" * 100000, "meta": "{}", "sha256": "x"}}).encode()),
    "header-nested-100000-deep": lambda: _safetensors(b'{"__metadata__":' + b"[" * 100000 + b"]" * 100000 + b"}"),
    "metadata-holding-a-2mb-string": lambda: _safetensors(json.dumps({"__metadata__": {
        "format": FORMAT, "skeleton": "x" * (2 << 20), "meta": "{}", "sha256": "x"}}).encode()),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_entries_are_corrupt_entries(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(cache_nodes, "MAX_HEADER_BYTES", 1 << 20)  # as the 64 MiB limit, at test scale
    first = _baseline(tmp_path)
    _entry_path(first).write_bytes(HOSTILE[kind]())
    with pytest.warns(CorruptEntryWarning):
        again = run(toy.nodes(), toy.resources(), cache_dir=tmp_path)
    assert again.record("TOY/toy_summary").reason == "corrupt-entry" and _values(again) == _values(first)


@pytest.mark.parametrize("content", [b"[1, 2, 3]", b"[" * 100000 + b"]" * 100000, b"{" + b" " * (2 << 20) + b"}", b"\xff\xfe"])
def test_hostile_history_and_memo_files_read_as_absent(tmp_path, content):
    first = _baseline(tmp_path)
    for p in [*Path(tmp_path, "history").iterdir(), Cache(tmp_path).filehash.path]:
        p.parent.mkdir(exist_ok=True)  # the toy run hashes no model file: no memo yet
        p.write_bytes(content)
    for p in _entry_path(first).parent.parent.glob("*/*.safetensors"):
        p.unlink()
    again = run(toy.nodes(), toy.resources(), cache_dir=tmp_path)
    assert again.ok and _values(again) == _values(first)
    assert {again.record(f"TOY/{m}").reason for m in toy.DEFAULT_METRICS} == {"new"}


def test_a_write_error_is_one_line_naming_the_file(tmp_path, monkeypatch):
    _full_disk_after(monkeypatch, 0)
    with pytest.raises(CacheWriteError, match=r"cannot write .*x\.bin: No space left on device \(5 bytes needed\)"):
        cache_files.atomic_write(tmp_path / "x.bin", b"12345")
    assert list(tmp_path.iterdir()) == []


def test_a_full_request_index_names_the_root_cause(tmp_path, monkeypatch, capsys):
    from evaldag.engine.cache.requests import RequestStore

    real = RequestStore._open

    def small(self):
        conn = real(self)
        conn.execute("PRAGMA max_page_count = 3")  # SQLite's own "disk full": the index is 7 pages, no room to grow
        conn.execute("CREATE TABLE IF NOT EXISTS filler (x BLOB)")
        return conn

    monkeypatch.setattr(RequestStore, "_open", small)
    assert cli.main(["run", "toy", "--quiet", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    index = Cache(tmp_path / "c").requests.index_path
    assert err == [f"evaldag: error: cannot write {index}: database or disk is full"]
