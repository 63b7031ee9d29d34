"""Small faults of the command line, each said in one plain line: a `cache merge` source's linked
entries (counted as skipped), a source that is the destination through a link, `--shard -1/2`
(the leading dash), and `--select` keywords in any case (WHERE as MAX)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import pytest

from evaldag.engine import run
from evaldag.engine.selection import parse, select
from evaldag.benchmarks import toy

from ..inprocess import run_cli

FIX = Path(__file__).parents[1] / "fixtures"
TINY = FIX / "tiny-llama"


def _evaldag(*args, cwd=None) -> subprocess.CompletedProcess:
    """The command in the test's process, in ``cwd`` when given (relative paths are the user's)."""
    with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
        return run_cli(list(args))


def _linked(src: Path, outside: Path) -> list[Path]:
    """One node entry, one request batch file and one history record of ``src`` moved outside
    and replaced by links to them."""
    outside.mkdir()
    victims = [sorted(src.glob("objects/*/*.safetensors"))[0], sorted(src.glob("requests/*/*.batch"))[0],
               sorted(src.glob("history/*.json"))[0]]
    for i, p in enumerate(victims):
        target = outside / f"{i}-{p.name}"
        p.rename(target)
        p.symlink_to(target)
    return victims


def test_cache_merge_counts_a_sources_linked_entries_as_skipped_in_plain_lines(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    run(toy.nodes(), toy.resources(), cache_dir=src)
    nodes, batches, history = (len(list(src.glob(g))) for g in ("objects/*/*.safetensors", "requests/*/*.batch",
                                                                 "history/*.json"))
    victims = _linked(src, tmp_path / "outside")
    done = _evaldag("cache", "merge", src, "--cache-dir", dest)
    assert done.returncode == 1, done.stderr  # something was skipped
    assert done.stderr == ""  # no warning's code line
    out = done.stdout.splitlines()
    assert out[0] == (f"merged {src}: {nodes - 1} node entries copied (0 already there), {batches - 1} request batch "
                      f"files copied (0 already there), {history - 1} history and run records; 3 skipped")
    assert sorted(out[1:]) == sorted(f"skipped: {p}: a symbolic link, not followed (the cache never follows a link "
                                     "it did not create)" for p in victims)
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert len(list(dest.glob("objects/*/*.safetensors"))) == nodes - 1


def test_cache_merge_of_the_destination_through_a_link_says_they_are_one_folder(tmp_path):
    cache = tmp_path / "cache"
    run(toy.nodes(), toy.resources(), cache_dir=cache)
    (tmp_path / "link").symlink_to(cache)
    for src, dest in (("link", "cache"), ("cache", "link"), ("cache", "cache")):
        done = _evaldag("cache", "merge", src, "--cache-dir", dest, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.splitlines() == [f"evaldag: error: cache merge: {src} and the destination --cache-dir {dest} "
                                            "are the same folder; nothing merged"], done.stderr


@pytest.mark.parametrize("form", ["space", "equals"])
def test_a_negative_shard_index_is_one_line_with_or_without_an_equals_sign(tmp_path, form):
    shard = ["--shard", "-1/2"] if form == "space" else ["--shard=-1/2"]
    done = _evaldag("run", "tofu", "--model", TINY / "target", "--model", TINY / "retain", "--data", FIX / "tofu_tiny",
                    "--out", tmp_path / "o", "--cache-dir", tmp_path / "c", *shard)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["evaldag: error: argument --shard: shard index -1 is out of range for 2 "
                                        "shards (I counts from 0: 0 to 1) (see `evaldag run --help`)"], done.stderr
    assert not (tmp_path / "o").exists()
    done = _evaldag("run", "tofu", "--model", TINY / "target", "--data", FIX / "tofu_tiny", "--shard", "--quiet")
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == ("evaldag: error: argument --shard: expected one argument (see `evaldag run --help`)")


ROWS = [("checkpoint-2", {"forget_quality": 0.01, "model_utility": 0.6, "forget_Q_A_Prob": 0.9}),
        ("checkpoint-4", {"forget_quality": 0.2, "model_utility": 0.5, "forget_Q_A_Prob": 0.4}),
        ("checkpoint-6", {"forget_quality": 0.3, "model_utility": 0.3, "forget_Q_A_Prob": 0.2})]


def test_select_keywords_are_read_in_any_case(tmp_path):
    for lower in ("max model_utility where forget_quality >= 0.05 and forget_Q_A_Prob < 0.5",
                  "pareto max forget_quality, min forget_Q_A_Prob where model_utility > 0.2"):
        upper = lower.replace("max", "MAX").replace("min", "Min").replace("where", "WHERE").replace("and", "AND") \
                     .replace("pareto", "PARETO")
        assert parse(upper).kind == parse(lower).kind and parse(upper).axes == parse(lower).axes
        assert parse(upper).conditions == parse(lower).conditions and parse(upper).conditions
        assert select(upper, ROWS).chosen == select(lower, ROWS).chosen != []
    # as a user gives it: a sweep's --select, the rule checked before any model loads (a typo in the
    # metric's name stops it there, so the keywords were read)
    done = _evaldag("run", "tofu", "--model", TINY / "target", "--model", TINY / "retain", "--data", FIX / "tofu_tiny",
                    "--metrics", "forget_Q_A_Prob", "--out", tmp_path / "o", "--cache-dir", tmp_path / "c",
                    "--select", "MAX forget_Q_A_Prob WHERE forget_Q_A_Porb >= 0 AND forget_Q_A_Prob < 1")
    assert done.returncode == 2 and not (tmp_path / "o").exists()
    assert done.stderr.splitlines()[-1] == ("evaldag: error: --select 'MAX forget_Q_A_Prob WHERE forget_Q_A_Porb >= 0 "
                                            "AND forget_Q_A_Prob < 1': no checkpoint has a metric 'forget_Q_A_Porb'; "
                                            "did you mean forget_Q_A_Prob?"), done.stderr
