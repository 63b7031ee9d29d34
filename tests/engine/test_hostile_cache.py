"""A cache in hostile hands (issue 26, items 5, 6, 7, 13): a folder that is not a cache, an entry a
newer evaldag wrote, another user's entries we cannot read, a lock held by a stopped process."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from evaldag.engine import cli, run
from evaldag.engine.cache import MARKER, Cache, LeftAloneWarning, NotACache, codec, locks
from evaldag.engine.cache.files import TMP_PREFIX
from evaldag.engine.cache.nodes import NodeStore
from evaldag.benchmarks import toy

EVALDAG = str(Path(sys.executable).with_name("evaldag"))
OLD = time.time() - 3 * 3600  # older than any sweep's cutoff (files.TMP_MAX_AGE_S is an hour)


def evaldag(*argv, user: str | None = None, umask: int | None = None, **kw) -> subprocess.CompletedProcess:
    cmd = [EVALDAG, *map(str, argv)]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    env = {**os.environ, "HOME": kw.pop("home", os.environ.get("HOME", "/tmp"))}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None, **kw)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its bytes (files) and mtime: what "nothing changed" means.
    SQLite's ``-shm`` is its shared-memory index, which every reader of a WAL database updates."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.name.endswith("-shm"):
            continue
        st = p.lstat()
        out[str(p.relative_to(root))] = (p.read_bytes() if p.is_file() and not p.is_symlink() else None, st.st_mtime_ns)
    return out


def one_line_error(proc: subprocess.CompletedProcess | str) -> str:
    err = proc if isinstance(proc, str) else proc.stderr
    assert err.count("\n") == 1 and err.startswith("evaldag: error: ") and "Traceback" not in err, err
    return err


@pytest.fixture()
def toy_cache(tmp_path):
    cache = tmp_path / "cache"  # in a subprocess: its database connection is closed (checkpointed) on exit
    done = evaldag("run", "toy", "--quiet", "--out", tmp_path / "first", "--cache-dir", cache)
    assert done.returncode == 0, done.stderr
    return cache


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "objects").glob("*/*.safetensors"))


def make_newer(p: Path, monkeypatch) -> bytes:
    """Rewrite entry ``p`` as evaldag 2 would: same value, format ``evaldag-node-2``, a valid checksum."""
    value, meta = codec.unpack(p.read_bytes())
    with monkeypatch.context() as m:
        m.setattr(codec, "FORMAT", "evaldag-node-2")
        data = codec.pack(value, meta)
    p.write_bytes(data)
    return data


# ---------------------------------------------------------------------- item 5: what becomes a cache
def test_an_empty_cache_path_is_an_error_not_the_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    assert cli.main(["run", "toy", "--quiet", "--cache-dir", "", "--out", str(tmp_path / "o")]) == 2
    assert "--cache-dir is an empty path (an unset variable?)" in one_line_error(capsys.readouterr().err)
    monkeypatch.setenv("EVALDAG_CACHE_DIR", "")
    assert cli.main(["run", "toy", "--quiet", "--out", str(tmp_path / "o")]) == 2
    assert "EVALDAG_CACHE_DIR is set but empty" in one_line_error(capsys.readouterr().err)
    assert cli.main(["cache", "ls"]) == 2
    assert "EVALDAG_CACHE_DIR is set but empty" in one_line_error(capsys.readouterr().err)
    with pytest.raises(NotACache, match="empty path"):
        run(toy.nodes(), toy.resources(), cache="")
    assert snapshot(tmp_path) == before and not (tmp_path / MARKER).exists()


def test_a_non_empty_folder_without_the_marker_is_refused_unless_init_cache(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    swap, mine = home / ".tmp-editor-swap", home / "thesis.tex"
    swap.write_text("unsaved work")
    mine.write_text("years of work")
    os.utime(swap, (OLD, OLD))
    before = snapshot(home)
    assert cli.main(["run", "toy", "--quiet", "--cache-dir", str(home), "--out", str(tmp_path / "o")]) == 2
    err = one_line_error(capsys.readouterr().err)
    assert f"--cache-dir {home}: the folder is not empty and has no {MARKER}" in err and "--init-cache" in err
    with pytest.raises(NotACache, match="--init-cache"):
        run(toy.nodes(), toy.resources(), cache=home)
    with pytest.raises(NotACache, match="--init-cache"):
        run(toy.nodes(), toy.resources(), cache=Cache(home))
    assert snapshot(home) == before and not (tmp_path / "o").exists()
    # an empty folder, or a new one, becomes a cache; so does a non-empty one with --init-cache
    (tmp_path / "empty").mkdir()
    assert run(toy.nodes(), toy.resources(), cache=tmp_path / "empty").ok and (tmp_path / "empty" / MARKER).is_file()
    assert cli.main(["run", "toy", "--quiet", "--init-cache", "--cache-dir", str(home), "--out", str(tmp_path / "o")]) == 0
    assert (home / MARKER).is_file() and len(entries(home)) == 6
    # the sweeps delete only temporaries carrying evaldag's mark: the user's swap file survives a run and a clear
    ours = entries(home)[0].parent / f"{TMP_PREFIX}killed.safetensors"
    ours.write_bytes(b"half an entry")
    os.utime(ours, (OLD, OLD))
    assert cli.main(["run", "toy", "--quiet", "--cache-dir", str(home), "--out", str(tmp_path / "o2")]) == 0
    assert swap.read_text() == "unsaved work" and not ours.exists()
    capsys.readouterr()
    assert cli.main(["cache", "clear", "--yes", "--cache-dir", str(home)]) == 0
    assert "left 2 paths the cache did not write" in capsys.readouterr().out
    assert sorted(p.name for p in home.iterdir()) == [".tmp-editor-swap", MARKER, "thesis.tex"]
    assert swap.read_text() == "unsaved work" and mine.read_text() == "years of work"


def test_a_new_folder_another_process_marks_and_fills_meanwhile_is_a_cache_not_foreign(tmp_path, monkeypatch):
    """The ranks of a job start on a new cache together: between one rank's look for the marker and
    its look at the contents, another rank marks the folder and stores into it."""
    from evaldag.engine.cache.safety import claim_root, root_state, write_marker

    root = tmp_path / "new"
    root.mkdir()
    listing = Path.iterdir

    def other_rank_first(self):
        if self == root and not (root / MARKER).exists():
            write_marker(root)
            (root / "objects").mkdir()
        return listing(self)

    monkeypatch.setattr(Path, "iterdir", other_rank_first)
    assert root_state(root) == "marked"
    claim_root(root)  # not refused as "not empty and has no evaldag-cache.json"
    monkeypatch.undo()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "thesis.tex").write_text("x")
    assert root_state(tmp_path / "foreign") == "foreign"


# ---------------------------------------------------------------------- item 6: looking never changes anything
def test_read_only_commands_change_nothing_and_name_each_state(toy_cache, monkeypatch, capsys):
    newer, corrupt = entries(toy_cache)[:2]
    make_newer(newer, monkeypatch)
    corrupt.write_bytes(corrupt.read_bytes()[:-7])
    before = snapshot(toy_cache)
    capsys.readouterr()
    assert cli.main(["cache", "ls", "--cache-dir", str(toy_cache)]) == 0
    out, err = capsys.readouterr()
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert len(lines) == 6
    assert "(newer: format 'evaldag-node-2', newer than this evaldag's 'evaldag-node-1')" in lines[newer.stem[:16]]
    assert "(corrupt: " in lines[corrupt.stem[:16]]
    assert err == "evaldag: 1 corrupt, 1 newer entries listed as such, left alone\n"
    assert cli.main(["cache", "info", "--cache-dir", str(toy_cache)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["nodes"], info["nodes_newer_format"], info["nodes_unreadable"]) == (6, 1, 0)
    assert cli.main(["cache", "explain", newer.stem, "--cache-dir", str(toy_cache)]) == 2
    assert capsys.readouterr().err == (f"evaldag: {newer}: format 'evaldag-node-2', newer than this evaldag's "
                                       "'evaldag-node-1'; left alone\n")
    assert cli.main(["cache", "explain", corrupt.stem, "--cache-dir", str(toy_cache)]) == 2
    assert cli.main(["cache", "verify", "--cache-dir", str(toy_cache)]) == 1
    out = capsys.readouterr().out
    assert out.endswith("6 entries, 1 corrupt, 1 in a newer format (left alone)\n")
    assert f"newer format, left alone: {newer}: format 'evaldag-node-2'" in out
    assert snapshot(toy_cache) == before  # nothing deleted, moved, touched or written
    # repair removes the corrupt entry only; prune and clear leave the newer one too
    assert cli.main(["cache", "verify", "--repair", "--cache-dir", str(toy_cache)]) == 0
    assert not corrupt.exists() and newer.exists()
    assert cli.main(["cache", "prune", "--older-than", "0s", "--cache-dir", str(toy_cache)]) == 0
    assert f"left alone: {newer}: newer format 'evaldag-node-2'" in capsys.readouterr().out
    assert cli.main(["cache", "clear", "--yes", "--cache-dir", str(toy_cache)]) == 0
    assert f"left alone: {newer}: newer format 'evaldag-node-2'" in capsys.readouterr().out
    assert entries(toy_cache) == [newer] and newer.read_bytes() == before[str(newer.relative_to(toy_cache))][0]


def test_inspecting_a_folder_that_is_not_a_cache_is_refused(tmp_path, capsys):
    weights = tmp_path / "copied" / "objects" / "ab"
    weights.mkdir(parents=True)
    (weights / ("ab" * 32 + ".safetensors")).write_bytes(b"\x08\0\0\0\0\0\0\0{}      weights")
    before = snapshot(tmp_path / "copied")
    for action in (["ls"], ["info"], ["verify"], ["verify", "--repair"], ["explain", "ab"]):
        assert cli.main(["cache", *action, "--cache-dir", str(tmp_path / "copied")]) == 2
        assert f"has no {MARKER}" in one_line_error(capsys.readouterr().err)
    assert snapshot(tmp_path / "copied") == before


def test_a_run_recomputes_a_newer_entry_and_leaves_it_alone(toy_cache, tmp_path, monkeypatch):
    first = json.loads((tmp_path / "first" / "TOY_EVAL.json").read_text())
    newer = entries(toy_cache)[0]
    data = make_newer(newer, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run(toy.nodes(), toy.resources(), cache=toy_cache)
    left = [w for w in caught if issubclass(w.category, LeftAloneWarning)]
    assert len(left) == 1 and str(left[0].message).startswith(
        "1 cache entries left alone (1 in a newer format (a newer evaldag wrote them)): their nodes were recomputed")
    assert sorted(r.status for r in res.records.values()).count("computed") == 1
    assert newer.read_bytes() == data  # not deleted, not overwritten
    done = evaldag("run", "toy", "--quiet", "--cache-dir", toy_cache, "--out", tmp_path / "again")
    assert done.returncode == 0 and "Traceback" not in done.stderr and "1 cache entries left alone" in done.stderr
    assert json.loads((tmp_path / "again" / "TOY_EVAL.json").read_text()) == first and newer.read_bytes() == data


# ---------------------------------------------------------------------- item 7: another user's entries
needs_nobody = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                  reason="needs root and setpriv to act as another user")


@needs_nobody
def test_another_users_cache_under_umask_077_is_unreadable_not_corrupt():
    """Root writes a cache with umask 077 (entries 0600), its folders open to all, as on a shared disk;
    ``nobody`` lists, verifies and runs on it. Root can read a 0600 file, so the test switches user."""
    base = Path(tempfile.mkdtemp(prefix="evaldag-umask-"))
    try:
        base.chmod(0o777)
        cache = base / "cache"
        done = evaldag("run", "toy", "--quiet", "--cache-dir", cache, "--out", base / "first", umask=0o077)
        assert done.returncode == 0, done.stderr
        for p in [cache, *cache.rglob("*")]:
            if p.is_dir():
                p.chmod(0o777)  # a shared folder: anyone may add entries, nobody may read root's
        assert (entries(cache)[0].stat().st_mode & 0o777) == 0o600
        before = snapshot(cache)
        ls = evaldag("cache", "ls", "--cache-dir", cache, user="65534", home=str(base))
        assert ls.returncode == 0 and "Traceback" not in ls.stderr, ls.stderr
        assert ls.stdout.count("(unreadable: Permission denied)") == 6
        assert ls.stderr == "evaldag: 6 unreadable entries listed as such, left alone\n"
        verify = evaldag("cache", "verify", "--cache-dir", cache, user="65534", home=str(base))
        assert verify.returncode == 0 and "Traceback" not in verify.stderr, verify.stderr
        assert verify.stdout.endswith("6 entries, 0 corrupt, 7 unreadable (left alone)\n")  # 6 nodes + the database
        info = evaldag("cache", "info", "--cache-dir", cache, user="65534", home=str(base))
        got = json.loads(info.stdout)
        assert (got["nodes"], got["nodes_unreadable"]) == (6, 6) and "unreadable" in got["requests_problem"]
        run_ = evaldag("run", "toy", "--quiet", "--cache-dir", cache, "--out", base / "nobody", user="65534", home=str(base))
        assert run_.returncode == 0 and "Traceback" not in run_.stderr, run_.stderr
        assert "6 cache entries left alone (6 unreadable to this user)" in run_.stderr
        assert json.loads((base / "nobody" / "TOY_EVAL.json").read_text()) == \
            json.loads((base / "first" / "TOY_EVAL.json").read_text())
        after = snapshot(cache)
        # root's files untouched; a folder's mtime may move: nobody's run adds its own run record (runs/)
        assert {k: v for k, v in after.items() if k in before and v[0] is not None} == \
            {k: v for k, v in before.items() if v[0] is not None}
        assert [k for k in after if k.startswith("runs/") and k not in before], "nobody's run recorded itself"
        shard = entries(cache)[0].parent
        shard.chmod(0o700)  # a folder nobody may even list
        ls = evaldag("cache", "ls", "--cache-dir", cache, user="65534", home=str(base))
        assert ls.returncode == 0 and ls.stdout.count("\n") == 5
        assert ls.stderr.startswith(f"evaldag: cannot list {shard} (permission denied): its entries are not shown\n")
        verify = evaldag("cache", "verify", "--cache-dir", cache, user="65534", home=str(base))
        assert f"unreadable, left alone: {shard}: folder not listable" in verify.stdout and "Traceback" not in verify.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------- item 13: a stopped lock holder
@pytest.fixture()
def stopped_holder(toy_cache):
    """A process holding the lock of the toy's summary node, then stopped (SIGSTOP) while holding it."""
    p = next(e for e in entries(toy_cache) if codec.unpack(e.read_bytes())[1]["node"] == "toy_summary")
    p.unlink()
    code = ("import os, signal, sys\nfrom evaldag.engine.cache.nodes import NodeStore\n"
            f"lk = NodeStore({str(toy_cache)!r}).lock({p.stem!r}).acquire()\nprint('held', flush=True)\n"
            "os.kill(os.getpid(), signal.SIGSTOP)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    try:
        yield toy_cache, p.stem, holder
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_a_wait_on_a_stopped_holder_says_whose_lock_and_lock_timeout_ends_it(stopped_holder, tmp_path):
    cache, fp, holder = stopped_holder
    pid = holder.pid
    t = time.monotonic()
    done = evaldag("run", "toy", "--quiet", "--cache-dir", cache, "--out", tmp_path / "o", "--lock-timeout", "2")
    assert done.returncode == 2 and 2 <= time.monotonic() - t < 60
    err = one_line_error(done)
    assert err.startswith("evaldag: error: gave up waiting for node toy_summary after 2 s (lock held by pid "
                          f"{pid} on {os.uname().nodename} since ")
    assert f"that process is stopped: `kill -CONT {pid}` resumes it); what was computed is stored" in err
    assert not (tmp_path / "o").exists() and len(entries(cache)) == 5  # the other nodes stay stored


def test_the_waiter_says_what_it_waits_for_after_a_few_seconds(stopped_holder, monkeypatch):
    cache, fp, holder = stopped_holder
    pid = holder.pid
    monkeypatch.setattr(locks, "NOTICE_S", 0.3)
    monkeypatch.setattr(locks, "REPEAT_S", 0.5)
    said = []
    with pytest.raises(locks.LockTimeout):
        locks.wait(NodeStore(cache).lock(fp), "TOY/toy_summary", 1.0, say=said.append)
    assert len(said) == 2 and said[0] == said[1]
    assert said[0].startswith(f"evaldag: waiting for node TOY/toy_summary (lock held by pid {pid} on ")
    assert said[0].endswith(f"; that process is stopped: `kill -CONT {pid}` resumes it)")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lk = locks.wait(NodeStore(cache).lock(fp), "TOY/toy_summary", 5.0, say=said.append)  # dies with its holder
    assert len(said) == 2
    lk.release()


def test_the_summary_line_says_how_much_of_the_run_was_waiting(toy_cache, tmp_path):
    """A run that waited for another process's node says both times: its own and the wait."""
    p = next(e for e in entries(toy_cache) if codec.unpack(e.read_bytes())[1]["node"] == "toy_summary")
    p.unlink()
    code = ("import time\nfrom evaldag.engine.cache.nodes import NodeStore\n"
            f"lk = NodeStore({str(toy_cache)!r}).lock({p.stem!r}).acquire()\nprint('held', flush=True)\n"
            "time.sleep(6)\nlk.release()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    done = evaldag("run", "toy", "--cache-dir", toy_cache, "--out", tmp_path / "o")
    holder.wait()
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("nodes: "))
    waited = float(line.split(" s of it waiting for other runs' nodes)")[0].rsplit("(", 1)[1])
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert 1 <= waited and 1.5 <= run["lock_wait_seconds"] <= run["wall_seconds"]
