"""``--add-metric FILE.py`` as a user runs it (``evaldag run tofu``; a rerun after an edit in a new process, one cache):
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
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from ..inprocess import run_cli, run_fresh

FIX = Path(__file__).parents[1] / "fixtures"
TARGET = FIX / "tiny-llama" / "target"
ROWS = 8  # rows per TOFU subset: enough to tell values apart, a fraction of the time


def trimmed(folder: Path) -> Path:
    """tofu_tiny with its first ROWS rows per subset, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in (FIX / "tofu_tiny").iterdir():
        lines = f.read_text().splitlines(keepends=True)
        (folder / f.name).write_text("".join(lines if f.suffix != ".json" else lines[:ROWS]))
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return trimmed(tmp_path_factory.mktemp("tofu"))


def tofu_args(data: Path, out: Path, cache: Path, *extra: str) -> list[str]:
    return ["run", "tofu", "--model", str(TARGET), "--data", str(data), "--metrics", "forget_Q_A_Prob", "--device", "cpu",
            "--dtype", "fp32", "--out", str(out), "--cache-dir", str(cache), "--quiet", *extra]


def tofu(data: Path, out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    """One run in the test's process: a file that is refused is never imported for good."""
    return run_cli(tofu_args(data, out, cache, *extra))


def read(out: Path, name: str) -> dict:
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


def metric_file_case(tmp: Path) -> tuple[tuple[str, ...], Callable[[], object], Callable[[Path], float], str]:
    """A @metric calling a helper of its file; the edit makes the helper count characters, not words
    -> (run arguments, the edit, the value read from an output folder, the node's name)."""
    file = tmp / "my_metrics.py"
    file.write_text(HELPED)
    return (("--add-metric", str(file)), lambda: file.write_text(HELPED.replace('len(row["answer"].split())', 'len(row["answer"])')),
            lambda out: read(out, "RUN_SUMMARY.json")["mean_answer_size"], "mean_answer_size")


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


def handler_case(tmp: Path) -> tuple[tuple[str, ...], Callable[[], object], Callable[[Path], float], str]:
    """An open-unlearning handler calling a helper of its file, through its config; the same edit."""
    handlers, config = tmp / "handlers.py", tmp / "answer_size.yaml"
    handlers.write_text(HANDLER)
    config.write_text(CONFIG)
    return (("--add-metric", str(handlers), "--add-metric", str(config)),
            lambda: handlers.write_text(HANDLER.replace('len(row["answer"].split())', 'len(row["answer"])')),
            lambda out: read(out, "TOFU_SUMMARY.json")["forget_answer_size"], "forget_answer_size")


def edited_run(tmp: Path, data: Path, args: tuple[str, ...], edit: Callable[[], object]) -> list[subprocess.CompletedProcess]:
    """Run, edit, rerun on the same cache ("after"), and the edited file on a fresh cache ("fresh"):
    the first run in a process of its own, the other two together in a second one (a user's
    rerun is a new process: the file is imported afresh)."""
    first = run_fresh(tofu_args(data, tmp / "before", tmp / "cache", *args))
    edit()
    return first + run_fresh(tofu_args(data, tmp / "after", tmp / "cache", *args),
                             tofu_args(data, tmp / "fresh", tmp / "cache-fresh", *args))


@pytest.mark.parametrize("case", [metric_file_case, handler_case], ids=lambda c: c.__name__)
def test_an_edited_helper_in_the_file_is_recomputed(tmp_path, data, case):
    args, edit, value, name = case(tmp_path)
    procs = edited_run(tmp_path, data, args, edit)
    assert all(p.returncode == 0 for p in procs), "".join(p.stderr for p in procs)
    before, got, want = (value(tmp_path / d) for d in ("before", "after", "fresh"))
    rows = [json.loads(x) for x in (data / "forget10_perturbed.json").read_text().splitlines() if x.strip()]
    assert before == pytest.approx(sum(len(r["answer"].split()) for r in rows) / len(rows))
    assert want == pytest.approx(sum(len(r["answer"]) for r in rows) / len(rows))
    assert got == want, f"served {got} after the helper was edited; a fresh cache computes {want} (before: {before})"
    assert read(tmp_path / "after", "run.json")["nodes"][name]["status"] == "computed"


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
