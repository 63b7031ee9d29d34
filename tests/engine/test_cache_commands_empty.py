"""The cache's look-only commands on a cache that does not exist yet: empty, not an error."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

EVALDAG = str(Path(sys.executable).with_name("evaldag"))


@pytest.mark.parametrize("action", ["info", "ls", "runs", "verify"])
def test_look_at_a_cache_before_its_first_run(tmp_path, action):
    root = tmp_path / "never-used"
    proc = subprocess.run([EVALDAG, "cache", action, "--cache-dir", str(root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"evaldag: the cache {root} is empty: it does not exist yet (the first `evaldag run` makes it)"]
    if action == "info":
        assert json.loads(proc.stdout) == {"root": str(root), "nodes": 0, "node_bytes": 0, "requests": 0, "request_bytes": 0}
    else:
        assert proc.stdout == ""
    assert not root.exists()  # looking made nothing


def test_a_folder_that_is_not_a_cache_is_still_refused(tmp_path):
    (tmp_path / "stuff.txt").write_text("x")
    proc = subprocess.run([EVALDAG, "cache", "info", "--cache-dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "is not a folder evaldag made as a cache" in proc.stderr
