"""Runs you can find again: each `evaldag run` records itself in its cache and
`evaldag cache runs` lists the records, reading only."""

import json
import subprocess
from pathlib import Path

from evaldag.engine import runlog

from ..inprocess import run_cli, run_fresh


def _evaldag(*args, check=True) -> subprocess.CompletedProcess:
    """The command in the test's process (``check``: a non-zero exit fails, as ``subprocess.run(check=True)``)."""
    done = run_cli(list(args))
    if check:
        done.check_returncode()
    return done


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_cache_runs_lists_each_run_with_command_out_and_node_counts(tmp_path):
    cache = tmp_path / "cache"
    # the runs in a process of their own, which ends: the read-only check below sees no file a
    # run in this process still holds open (its request index's WAL)
    for done in run_fresh(["run", "toy", "--out", tmp_path / "cold", "--cache-dir", cache],
                          ["run", "toy", "--out", tmp_path / "warm", "--cache-dir", cache]):
        done.check_returncode()
    records = [p for p, _ in runlog.runs(cache)]  # oldest first, also for two runs within one second
    assert len(records) == 2
    first = json.loads(records[0].read_text())
    n = len(json.loads((tmp_path / "cold" / "run.json").read_text())["nodes"])
    assert first["nodes"] == {"computed": n, "cached": 0, "failed": 0, "skipped": 0}
    assert first["benchmarks"] == ["toy"] and first["out"] == str((tmp_path / "cold").resolve())
    assert first["command"][:3] == ["evaldag", "run", "toy"]
    assert records[1].stat().st_size < 2000  # small: no values, no node list

    before = _tree(cache)
    listed = _evaldag("cache", "runs", "--cache-dir", cache)
    assert _tree(cache) == before  # read-only
    lines = listed.stdout.splitlines()
    assert len(lines) == 2
    assert f"{n} computed, 0 cached" in lines[0] and f"out={(tmp_path / 'cold').resolve()}" in lines[0]
    assert f"0 computed, {n} cached" in lines[1] and f"out={(tmp_path / 'warm').resolve()}" in lines[1]
    assert lines[1].startswith(json.loads(records[1].read_text())["when"] + "  toy  ")
    assert lines[1].endswith(f"$ evaldag run toy --out {tmp_path / 'warm'} --cache-dir {cache}")


def test_cache_runs_on_an_empty_cache_and_on_a_folder_that_is_no_cache(tmp_path):
    cache = tmp_path / "cache"
    _evaldag("run", "toy", "--out", tmp_path / "o", "--cache-dir", cache)
    for p in (cache / "runs").iterdir():
        p.unlink()
    done = _evaldag("cache", "runs", "--cache-dir", cache)
    assert done.stdout == "" and "no runs recorded" in done.stderr
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("mine")
    done = _evaldag("cache", "runs", "--cache-dir", tmp_path / "plain", check=False)
    assert done.returncode == 2 and done.stderr.startswith("evaldag: error: ") and done.stderr.count("\n") == 1


def test_cache_clear_removes_the_run_records(tmp_path):
    cache = tmp_path / "cache"
    _evaldag("run", "toy", "--out", tmp_path / "o", "--cache-dir", cache)
    assert list((cache / "runs").iterdir())
    done = _evaldag("cache", "clear", "--yes", "--cache-dir", cache)
    assert not (cache / "runs").exists() and "did not write" not in done.stdout
