"""Job arrays on one shared cache: `--shard I/N`, a request store N hosts may
write at once (content-addressed batch files, a per-host index rebuilt from them), SIGKILLs
mid-run, `evaldag cache merge`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaldag.engine import Cache, cli, run
from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine.cache import RequestStore
from evaldag.engine.cache.codec import pack
from evaldag.engine.sweep_plan import folder_names, take_shard
from evaldag.engine.executor import Executor
from evaldag.engine.requests import TokenStats
from evaldag.benchmarks import toy
from tests.conftest_models import nudged_checkpoint

FIX = Path(__file__).parents[1] / "fixtures"
TINY = FIX / "tiny-llama"
ARGS = ["run", "tofu", "--data", str(FIX / "tofu_tiny"), "--retain-model", str(TINY / "retain"),
        "--metrics", "forget_Q_A_Prob", "--quiet"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _reqs(n: int) -> list:
    return [TokenStats((1, 2 + i % 5), tuple(range(3, 4 + i))) for i in range(n)]


def _as_host(monkeypatch, name: str, root: Path) -> RequestStore:
    monkeypatch.setenv("EVALDAG_HOST", name)
    return RequestStore(root)


def test_two_hosts_share_the_request_store_through_the_files_alone(tmp_path, monkeypatch):
    """Host a stores; host b, with no index of its own yet, finds every answer by listing the files;
    b's discard (a model that changed under its run) reaches a's index too."""
    model, reqs = ToyModel(), _reqs(9)
    a = _as_host(monkeypatch, "host-a", tmp_path)
    cold = Executor(cache=a, batch_tokens=30).serve([(model, r) for r in reqs])
    files = sorted(tmp_path.glob("requests/*/*.batch"))
    assert len(files) > 1 and a.count() == 9  # one file per batch
    b = _as_host(monkeypatch, "host-b", tmp_path)
    assert not b.index_path.exists()
    warm = Executor(cache=b).serve([(model, r) for r in reqs])
    assert [w.logprob.tolist() for w in warm] == [c.logprob.tolist() for c in cold]
    assert sorted(p.name for p in (tmp_path / "index").iterdir() if p.suffix == ".sqlite") == \
        ["requests-host-a.sqlite", "requests-host-b.sqlite"]
    key = Executor.model_key(model)
    store_key = Executor(cache=b).store_key(model, key)
    taken = [k for k in b.get_many(store_key, [r.key() for r in reqs])][:4]
    b.discard(store_key, taken)
    assert len(a.get_many(store_key, taken)) == 0 and a.count() == 5


def test_an_older_caches_request_database_is_migrated_once(tmp_path):
    import sqlite3

    model, reqs = ToyModel(), _reqs(3)
    fresh = tmp_path / "fresh"
    want = Executor(cache=RequestStore(fresh)).serve([(model, r) for r in reqs])
    store_key = Executor().store_key(model, Executor.model_key(model))
    legacy = tmp_path / "old"
    legacy.mkdir()
    db = sqlite3.connect(legacy / "requests.sqlite")
    db.execute("CREATE TABLE results (model TEXT, key TEXT, kind TEXT, payload BLOB, written REAL, PRIMARY KEY (model, key))")
    for r, w in zip(reqs, want):
        db.execute("INSERT INTO results VALUES (?,?,?,?,?)",
                   (store_key, r.key(), "token_stats", pack(w.to_arrays(), {}), 1.0))
    db.commit()
    db.close()
    got = RequestStore(legacy).get_many(store_key, [r.key() for r in reqs])
    assert [got[r.key()].logprob.tolist() for r in reqs] == [w.logprob.tolist() for w in want]
    assert not (legacy / "requests.sqlite").exists() and (legacy / "requests.sqlite.migrated").exists()
    assert len(list(legacy.glob("requests/*/*.batch"))) == 1


def test_shard_bad_input_is_one_line(tmp_path, capsys):
    base = ["run", "tofu", "--model", str(TINY / "target"), "--data", str(FIX / "tofu_tiny"), "--out", str(tmp_path / "o")]
    for value, why in (("2/2", "shard index 2 is out of range for 2 shards (I counts from 0: 0 to 1)"),
                       ("-1/3", "shard index -1 is out of range for 3 shards"), ("1/0", "N must be at least 1"),
                       ("one", "is not I/N")):
        with pytest.raises(SystemExit) as e:
            cli.main([*base, f"--shard={value}"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("evaldag: error: argument --shard: ") and why in err[0], err
    assert not (tmp_path / "o").exists()
    models = [f"ck/step-{i}" for i in range(5)]
    assert take_shard(models, (1, 2)) == (models[1::2], folder_names(models)[1::2])
    assert take_shard(models[:1], (1, 2)) == ([], [])


def _nodes(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


@pytest.mark.slow
def test_shards_started_at_once_with_sigkills_then_a_plain_run_is_fully_warm(tmp_path, capsys):
    """Three processes at once on one cache: shard 0/2, shard 1/2, and a second shard 0/2 killed with
    SIGKILL as soon as the first answers are stored; a shard whose index another live process holds
    is warned about. Then the plain sweep over every checkpoint forwards nothing and computes no
    node, and its outputs are byte-identical to the shards'."""
    ckpts = [str(TINY / "target"), str(nudged_checkpoint(tmp_path / "nudged", 1.01))]
    cache = tmp_path / "cache"
    models = [a for c in ckpts for a in ("--model", c)]
    cmd = [sys.executable, "-m", "evaldag.engine.cli", *ARGS, *models, "--cache-dir", str(cache)]
    procs = {name: subprocess.Popen([*cmd, "--shard", shard, "--out", str(tmp_path / name)], env=ENV,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, shard in (("s0", "0/2"), ("s1", "1/2"), ("killed", "0/2"))}
    deadline = time.monotonic() + 120
    while not list(cache.glob("requests/*/*.batch")) and time.monotonic() < deadline and procs["killed"].poll() is None:
        time.sleep(0.05)
    procs["killed"].send_signal(signal.SIGKILL)
    done = {name: p.communicate(timeout=300) for name, p in procs.items()}
    assert procs["killed"].returncode == -signal.SIGKILL
    for name in ("s0", "s1"):
        assert procs[name].returncode == 0, done[name][1]
        assert "Traceback" not in done[name][1]
    names = folder_names(ckpts)
    assert [p.name for p in (tmp_path / "s0").iterdir() if p.is_dir() and not p.name.startswith(".")] == [names[0]]
    assert [p.name for p in (tmp_path / "s1").iterdir() if p.is_dir() and not p.name.startswith(".")] == [names[1]]
    assert Cache(cache).verify() == []

    out = tmp_path / "plain"  # the whole sweep, one process: everything is in the cache
    assert cli.main([*ARGS, *models, "--cache-dir", str(cache), "--out", str(out)]) == 0
    for i, name in enumerate(names):
        got = _nodes(out / name)
        assert got["executor"]["sequences_forwarded"] == 0, name
        assert {n["status"] for n in got["nodes"].values()} == {"cached"}, name
        shard_out = tmp_path / ("s0" if i % 2 == 0 else "s1") / name
        assert (out / name / "TOFU_EVAL.json").read_bytes() == (shard_out / "TOFU_EVAL.json").read_bytes()
    left = [p.name for p in (cache / "shards").rglob("*.json")]  # the finished shards took their records back
    assert all(n.endswith(f"-{procs['killed'].pid}.json") for n in left), left

    # two live processes holding one index: the second is told, with the first's pid and host
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        from evaldag.engine.cache.files import host_id
        from evaldag.engine.cache.shards import ShardRecord, sweep_id

        rec = ShardRecord(cache, sweep_id(ckpts, ["tofu"], 2), 1, 2)
        rec.path = rec.dir / f"1-of-2-{host_id()}-{sleeper.pid}.json"
        rec.path.parent.mkdir(parents=True, exist_ok=True)
        rec.path.write_text(json.dumps({"index": 1, "of": 2, "host": host_id(), "pid": sleeper.pid, "since": 0}))
        code = cli.main([*ARGS, *models, "--cache-dir", str(cache), "--shard", "1/2", "--out", str(tmp_path / "dup")])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert code == 0
    assert capsys.readouterr().err.startswith(f"evaldag: warning: shard 1/2 of this sweep is also being run by pid {sleeper.pid} "
                                   f"on {host_id()} since 1970-01-01 00:00:00 UTC (still running on this host)")


def test_cache_merge_folds_per_job_caches_into_one(tmp_path, capsys):
    a, b, dest = tmp_path / "a", tmp_path / "b", tmp_path / "dest"
    first = run(toy.nodes(), toy.resources(), cache_dir=a)
    second = run(toy.nodes(), toy.resources(seed=1), cache_dir=b)
    victim = sorted(b.glob("objects/*/*.safetensors"))[0]
    victim.write_bytes(victim.read_bytes()[:-5] + b"xxxxx")
    assert cli.main(["cache", "merge", str(a), str(b), "--cache-dir", str(dest)]) == 1  # one entry skipped
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"merged {a}: 6 node entries copied (0 already there), ")
    assert out[1].startswith(f"merged {b}: 5 node entries copied") and out[2].startswith(f"skipped: {victim}: ")
    warm = run(toy.nodes(), toy.resources(), cache_dir=dest)
    assert warm.executor["sequences_forwarded"] == 0 and {r.status for r in warm.records.values()} == {"cached"}
    other = run(toy.nodes(), toy.resources(seed=1), cache_dir=dest)
    assert other.executor["sequences_forwarded"] == 0
    assert sum(r.status == "computed" for r in other.records.values()) == 1  # only the skipped entry
    assert first.ok and second.ok
    assert cli.main(["cache", "merge", str(a), "--cache-dir", str(dest)]) == 0  # again: nothing new
    assert capsys.readouterr().out.startswith(f"merged {a}: 0 node entries copied (6 already there), 0 request")
    (tmp_path / "plain").mkdir()
    assert cli.main(["cache", "merge", str(tmp_path / "plain"), "--cache-dir", str(tmp_path / "d2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"evaldag: error: {tmp_path / 'plain'} has no evaldag-cache.json")
    assert not (tmp_path / "d2").exists()


def test_a_linked_request_index_is_refused_and_the_answers_are_still_found(tmp_path):
    from evaldag.engine.cache import LinkWarning

    model, reqs = ToyModel(), _reqs(3)
    want = Executor(cache=RequestStore(tmp_path / "c")).serve([(model, r) for r in reqs])
    store = RequestStore(tmp_path / "c")
    for p in store.files():
        p.unlink(missing_ok=True)
    outside = tmp_path / "elsewhere.sqlite"
    outside.write_bytes(b"")
    store.index_path.symlink_to(outside)
    ex = Executor(cache=store)
    with pytest.warns(LinkWarning, match="is a link"):
        got = ex.serve([(model, r) for r in reqs])
    stats = ex.stats.summary()
    assert stats["cached"] == 3 and stats["sequences_forwarded"] == 0 and outside.read_bytes() == b""
    assert [g.logprob.tolist() for g in got] == [w.logprob.tolist() for w in want]


WRITER = """
import sys, time
from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine.cache import RequestStore
from evaldag.engine.executor import Executor
from evaldag.engine.requests import TokenStats
root, first, slow = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "slow"
reqs = [TokenStats((1, 2 + i % 5), tuple(range(3, 4 + i % 40))) for i in range(first, first + 120)]
ex = Executor(cache=RequestStore(root), batch_tokens=60, fault=(lambda kind, batch: time.sleep(0.02)) if slow else None)
ex.serve([(ToyModel(), r) for r in reqs])
"""


@pytest.mark.slow
def test_four_hosts_write_one_request_store_at_once_and_a_killed_one_loses_nothing_stored(tmp_path):
    """Four processes as four hosts (each its own index), overlapping requests, started at once; one
    is SIGKILLed mid-run. A fifth host then finds every answer the others finished, each equal to
    an answer computed alone, and none twice in its count."""
    root = tmp_path / "shared"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(first), "slow" if i == 3 else "fast"],
                              env={**ENV, "EVALDAG_HOST": f"host-{i}"}, stderr=subprocess.PIPE, text=True)
             for i, first in enumerate((0, 40, 80, 20))]
    deadline = time.monotonic() + 60
    while not list(root.glob("requests/*/*.batch"))[3:] and time.monotonic() < deadline:
        time.sleep(0.02)
    procs[3].send_signal(signal.SIGKILL)
    for p in procs[:3]:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    assert procs[3].wait(timeout=60) == -signal.SIGKILL
    model = ToyModel()
    every = [TokenStats((1, 2 + i % 5), tuple(range(3, 4 + i % 40))) for i in range(0, 200)]
    alone = Executor().serve([(model, r) for r in every])
    fifth = RequestStore(root)
    key = Executor().store_key(model, Executor.model_key(model))
    found = fifth.get_many(key, [r.key() for r in every])
    assert len(found) == fifth.count() == len({r.key() for r in every})  # hosts 0-2 covered all 200
    for r, want in zip(every, alone):
        assert found[r.key()].logprob.tolist() == want.logprob.tolist()
    names = {p.name for p in (root / "index").glob("*.sqlite")}  # one index per host, the files shared
    assert {f"requests-host-{i}.sqlite" for i in range(3)} <= names and fifth.index_path.name in names
