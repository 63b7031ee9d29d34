"""``--add-metric FILE.py`` as a user runs it (``evaldag run tofu`` in a subprocess, one cache):
what the file's code is, what its metrics are called, and what its import may do.

* A helper the metric or an open-unlearning handler calls, edited in the same file: the
  rerun recomputes (the file's code as a whole is the metric's code identity) and gives
  what a fresh cache gives.
* A metric named like one of the benchmark's (``forget_Q_A_Prob`` beside TOFU's): refused
  in one line naming both, nothing written -- never one value under both names.
* ``sys.exit()`` while the file is imported: one line, exit 2, nothing written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIX = Path(__file__).parents[1] / "fixtures"
TARGET = FIX / "tiny-llama" / "target"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))
ROWS = 8  # rows per TOFU subset: enough to tell values apart, a fraction of the time


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """tofu_tiny with its first ROWS rows per subset."""
    folder = tmp_path_factory.mktemp("tofu")
    for f in (FIX / "tofu_tiny").iterdir():
        lines = f.read_text().splitlines(keepends=True)
        (folder / f.name).write_text("".join(lines if f.suffix != ".json" else lines[:ROWS]))
    return folder


def tofu(data: Path, out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([EVALDAG, "run", "tofu", "--model", str(TARGET), "--data", str(data), "--metrics", "forget_Q_A_Prob",
                           "--device", "cpu", "--dtype", "fp32", "--out", str(out), "--cache-dir", str(cache), "--quiet", *extra],
                          capture_output=True, text=True, env=env, timeout=900)


def _read(out: Path, name: str) -> dict:
    return json.loads((out / name).read_text())


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("evaldag: error: "), (proc.returncode, proc.stderr)
    return lines[0]


# ---------------------------------------------------------------------- a helper edited
HELPED = '''
from evaldag.engine import Result, metric


def answer_size(row):
    return len(row["answer"].split())


@metric("mean_answer_size", version="1", needs=("data",))
def mean_answer_size(data):
    rows = list(data)
    return Result(sum(answer_size(r) for r in rows) / len(rows))
'''


def test_an_edited_helper_of_a_metric_file_is_recomputed(tmp_path, data):
    file = tmp_path / "my_metrics.py"
    file.write_text(HELPED)
    first = tofu(data, tmp_path / "before", tmp_path / "cache", "--add-metric", str(file))
    assert first.returncode == 0, first.stderr
    words = _read(tmp_path / "before", "RUN_SUMMARY.json")["mean_answer_size"]
    file.write_text(HELPED.replace('len(row["answer"].split())', 'len(row["answer"])'))  # words -> characters
    again = tofu(data, tmp_path / "after", tmp_path / "cache", "--add-metric", str(file))
    assert again.returncode == 0, again.stderr
    rows = [json.loads(x) for x in (data / "forget10_perturbed.json").read_text().splitlines() if x.strip()]
    chars = sum(len(r["answer"]) for r in rows) / len(rows)
    assert words == pytest.approx(sum(len(r["answer"].split()) for r in rows) / len(rows)) and chars != words
    assert _read(tmp_path / "after", "RUN_SUMMARY.json")["mean_answer_size"] == pytest.approx(chars)
    node = _read(tmp_path / "after", "run.json")["nodes"]["mean_answer_size"]
    assert (node["status"], node["reason"]) == ("computed", "code")


HANDLER = '''
from evaldag.metrics.unlearning.open_unlearning_compat import unlearning_metric


def size(row):
    return len(row["answer"].split())


@unlearning_metric(name="answer_size")
def answer_size(model, **kwargs):
    rows = kwargs["data"]
    return {"agg_value": float(sum(size(r) for r in rows) / len(rows))}
'''

CONFIG = """# @package eval.tofu.metrics.forget_answer_size
defaults:
  - ../../data/datasets@datasets: TOFU_QA_forget
handler: answer_size
"""


def test_an_edited_helper_of_an_open_unlearning_handler_is_recomputed(tmp_path, data):
    handlers, config = tmp_path / "handlers.py", tmp_path / "answer_size.yaml"
    handlers.write_text(HANDLER)
    config.write_text(CONFIG)
    args = ("--add-metric", str(handlers), "--add-metric", str(config))
    first = tofu(data, tmp_path / "before", tmp_path / "cache", *args)
    assert first.returncode == 0, first.stderr
    before = _read(tmp_path / "before", "TOFU_SUMMARY.json")["forget_answer_size"]
    handlers.write_text(HANDLER.replace('len(row["answer"].split())', 'len(row["answer"])'))
    again = tofu(data, tmp_path / "after", tmp_path / "cache", *args)
    fresh = tofu(data, tmp_path / "fresh", tmp_path / "cache-fresh", *args)
    assert again.returncode == 0 and fresh.returncode == 0, again.stderr + fresh.stderr
    want = _read(tmp_path / "fresh", "TOFU_SUMMARY.json")["forget_answer_size"]
    assert want != before
    assert _read(tmp_path / "after", "TOFU_SUMMARY.json")["forget_answer_size"] == want
    assert _read(tmp_path / "after", "run.json")["nodes"]["forget_answer_size"]["status"] == "computed"


# ---------------------------------------------------------------------- one name, two metrics
CLASH = '''
from evaldag.engine import Result, metric


@metric("forget_Q_A_Prob", version="1", needs=("data",))
def my_prob(data):
    return Result(0.5)
'''


def test_a_metric_named_like_the_benchmarks_own_is_refused_naming_both(tmp_path, data):
    file = tmp_path / "clash.py"
    file.write_text(CLASH)
    line = _one_line(tofu(data, tmp_path / "out", tmp_path / "cache", "--add-metric", str(file)))
    assert "'forget_Q_A_Prob'" in line and "TOFU" in line and str(file) in line, line
    assert not (tmp_path / "out").exists()


def test_two_files_declaring_one_name_are_refused_naming_both_files(tmp_path, data):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(CLASH.replace("forget_Q_A_Prob", "my_prob"))
    b.write_text(CLASH.replace("forget_Q_A_Prob", "my_prob"))
    line = _one_line(tofu(data, tmp_path / "out", tmp_path / "cache", "--add-metric", str(a), "--add-metric", str(b)))
    assert "'my_prob'" in line and str(a) in line and str(b) in line, line
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------- SystemExit at import
@pytest.mark.parametrize("call,shown", [("sys.exit(0)", "sys.exit(0)"), ("sys.exit('usage: x.py IN')", "sys.exit('usage: x.py IN')"),
                                        ("raise SystemExit(3)", "sys.exit(3)")])
def test_sys_exit_while_importing_a_metric_file_is_one_line_exit_2(tmp_path, data, call, shown):
    file = tmp_path / "script.py"
    file.write_text(f"import sys\n\nprint('rows:', 3)\n{call}\n")
    proc = tofu(data, tmp_path / "out", tmp_path / "cache", "--add-metric", str(file))
    line = _one_line(proc)
    assert line == f"evaldag: error: --add-metric {file}: importing it called {shown}; a metric file must not exit " \
                   "(put a script's own work under `if __name__ == \"__main__\":`)", line
    assert not (tmp_path / "out").exists()
