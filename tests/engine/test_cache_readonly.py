"""A shared read-only cache: a warm run writes nothing, new work is refused
up front naming the nodes, or goes to a writable cache layered over the read-only one."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def evaldag(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([EVALDAG, *map(str, argv)], capture_output=True, text=True, env={**os.environ})


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture()
def shared(tmp_path):
    """A full toy cache, then made read-only: a read-only bind mount as root, chmod otherwise."""
    src, ro = tmp_path / "cache", tmp_path / "shared"
    done = evaldag("run", "toy", "--out", tmp_path / "first", "--cache-dir", src, "--quiet")
    assert done.returncode == 0, done.stderr
    if os.geteuid() == 0:
        ro.mkdir()
        mounted = subprocess.run(["mount", "--bind", src, ro], capture_output=True)
        if mounted.returncode != 0 or subprocess.run(["mount", "-o", "remount,bind,ro", ro], capture_output=True).returncode:
            subprocess.run(["umount", ro], capture_output=True)
            pytest.skip("running as root without permission to make a read-only bind mount")
        try:
            yield ro
        finally:
            subprocess.run(["umount", ro], check=True)
    else:
        for p in [src, *src.rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)
        try:
            yield src
        finally:
            for p in [src, *src.rglob("*")]:
                if p.is_dir():
                    p.chmod(0o755)


def test_a_warm_run_on_a_read_only_cache_writes_nothing(shared, tmp_path):
    before = _snapshot(shared)
    done = evaldag("run", "toy", "--out", tmp_path / "out", "--cache-dir", shared, "--quiet")
    assert done.returncode == 0, done.stderr
    nodes = json.loads((tmp_path / "out" / "run.json").read_text())["nodes"]
    assert {n["status"] for n in nodes.values()} == {"cached"}
    assert _snapshot(shared) == before  # no lock file, no history, no marker, no memo


def test_new_work_on_a_read_only_cache_is_refused_naming_the_nodes(shared, tmp_path):
    done = evaldag("run", "toy", "--toy-seed", "1", "--out", tmp_path / "out", "--cache-dir", shared)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line, = done.stderr.strip().splitlines()
    assert "is read-only and 6 nodes are not in it" in line and "toy_summary" in line
    assert f"--cache-read-from {shared}" in line and not (tmp_path / "out").exists()


def test_a_writable_cache_over_the_read_only_one(shared, tmp_path):
    rw = tmp_path / "rw"
    before = _snapshot(shared)
    done = evaldag("run", "toy", "--out", tmp_path / "o1", "--cache-dir", rw, "--cache-read-from", shared, "--quiet")
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "o1" / "run.json").read_text())
    assert {n["status"] for n in run["nodes"].values()} == {"cached"} and not list(rw.glob("objects/*/*"))
    done = evaldag("run", "toy", "--toy-seed", "1", "--out", tmp_path / "o2", "--cache-dir", rw, "--cache-read-from", shared,
                   "--quiet")
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "o2" / "run.json").read_text())
    assert {n["status"] for n in run["nodes"].values()} == {"computed"} and len(list(rw.glob("objects/*/*"))) == 6
    assert _snapshot(shared) == before
