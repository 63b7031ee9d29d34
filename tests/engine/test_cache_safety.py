"""`evaldag cache clear` / `prune` touch only what the cache wrote."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaldag.engine import cli
from evaldag.engine.cache import MARKER, Cache, NotACache

EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture()
def used_cache(tmp_path):
    cache = tmp_path / "cache"
    assert cli.main(["run", "toy", "--quiet", "--out", str(tmp_path / "o"), "--cache-dir", str(cache)]) == 0
    return cache


def test_clear_removes_the_cache_entries_and_nothing_else(used_cache, tmp_path, capsys):
    cache = used_cache
    assert (cache / MARKER).is_file() and len(list((cache / "objects").glob("*/*.safetensors"))) == 6
    outside = tmp_path / "theses"
    outside.mkdir()
    (outside / "thesis.tex").write_text("years of work")
    (outside / "aa.safetensors").write_text("not a cache entry either")
    before_outside = _files(outside)
    (cache / "notes.txt").write_text("a decoy in the root")
    shard = next((cache / "objects").iterdir())
    (shard / "decoy.txt").write_text("a decoy among the objects")
    (cache / "objects" / "ff").symlink_to(outside, target_is_directory=True)  # looks like a shard, points out
    (cache / "history" / ("a" * 32 + ".json")).symlink_to(outside / "thesis.tex")  # looks like history
    capsys.readouterr()
    assert cli.main(["cache", "clear", "--yes", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "files removed" in out and "left 4 paths the cache did not write" in out
    assert _files(outside) == before_outside  # nothing outside the cache was touched
    assert not list(cache.rglob("*.safetensors")) or all(p.is_symlink() or "ff" in p.parts for p in cache.rglob("*.safetensors"))
    assert (cache / "notes.txt").read_text() == "a decoy in the root" and (shard / "decoy.txt").exists()
    assert (cache / "objects" / "ff").is_symlink() and (cache / "history" / ("a" * 32 + ".json")).is_symlink()
    assert not (cache / "requests.sqlite").exists() and not (cache / "locks").exists()


def test_clear_and_prune_refuse_a_folder_the_cache_did_not_make(tmp_path, capsys):
    theses = tmp_path / "theses"
    (theses / "objects" / "ab").mkdir(parents=True)
    (theses / "thesis.tex").write_text("years of work")
    (theses / "objects" / "ab" / ("ab" * 32 + ".safetensors")).write_text("looks like an entry")
    before = _files(theses)
    for argv in (["clear", "--yes"], ["prune", "--older-than", "0s"]):
        assert cli.main(["cache", *argv, "--cache-dir", str(theses)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"has no {MARKER}" in err and "nothing removed" in err
    assert _files(theses) == before
    with pytest.raises(NotACache):
        Cache(theses).clear()
    assert cli.main(["cache", "clear", "--yes", "--cache-dir", str(tmp_path / "nowhere")]) == 2


def test_clear_without_a_terminal_needs_yes(used_cache):
    done = subprocess.run([EVALDAG, "cache", "clear", "--cache-dir", str(used_cache)], input="n\n",
                          capture_output=True, text=True, env={**os.environ})
    assert done.returncode == 2 and "needs --yes" in done.stderr and "Traceback" not in done.stderr
    assert len(list((used_cache / "objects").glob("*/*.safetensors"))) == 6


def test_prune_does_not_follow_a_linked_shard(used_cache, tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / ("cd" * 32 + ".safetensors")).write_text("someone else's file")
    (used_cache / "objects" / "cd").symlink_to(outside, target_is_directory=True)
    capsys.readouterr()
    assert cli.main(["cache", "prune", "--older-than", "0s", "--cache-dir", str(used_cache)]) == 0
    assert capsys.readouterr().out == "pruned 18 entries\n"  # the toy run's 6 nodes and 12 requests
    assert (outside / ("cd" * 32 + ".safetensors")).read_text() == "someone else's file"
    assert [p for p in (used_cache / "objects").glob("*/*.safetensors") if not p.parent.is_symlink()] == []
