"""``--limit``: the first N rows of every split (a fraction below 1), one meaning for every benchmark."""

import json
import subprocess
from pathlib import Path

import pytest

from evaldag.engine.resources import Rows, first_rows

from ..inprocess import run_cli

FIX = Path(__file__).parents[1] / "fixtures"


def tofu(tmp: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    return run_cli(["run", "tofu", "--model", FIX / "tiny-llama" / "target", "--data", FIX / "tofu_tiny",
                    "--metrics", "forget_Q_A_Prob,forget_truth_ratio", "--quiet", "--out", tmp / name,
                    "--cache-dir", tmp / "cache", *extra])


def test_first_rows():
    rows = list(range(40))
    assert first_rows(rows, None) == rows and first_rows(rows, 5.0) == [0, 1, 2, 3, 4]
    assert first_rows(rows, 0.25) == rows[:10] and first_rows(rows, 0.01) == [0]  # ceil, as lm-eval
    assert first_rows(rows, 100.0) == rows
    limited, full = Rows(lambda: rows, "x", limit=3), Rows(lambda: rows, "x")
    assert limited.value() == [0, 1, 2] and limited.fingerprint() != full.fingerprint()
    assert limited.describe() == {"source": "x", "limit": 3, "rows": 3}


def test_limit_scores_the_first_rows_and_says_so(tmp_path):
    assert tofu(tmp_path, "full").returncode == 0
    proc = tofu(tmp_path, "five", "--limit", "5")
    assert proc.returncode == 0, proc.stderr
    full, five = (json.loads((tmp_path / n / "TOFU_EVAL.json").read_text()) for n in ("full", "five"))
    items = five["forget_Q_A_Prob"]["value_by_index"]
    assert list(items) == ["0", "1", "2", "3", "4"]
    assert items == {k: full["forget_Q_A_Prob"]["value_by_index"][k] for k in items}  # the same numbers, served from cache
    run = json.loads((tmp_path / "five" / "run.json").read_text())
    forget = run["provenance"]["resources"]["tofu_forget"]
    assert (forget["limit"], forget["rows"]) == (5, 5)
    full_run = json.loads((tmp_path / "full" / "run.json").read_text())
    assert forget["fingerprint"] != full_run["provenance"]["resources"]["tofu_forget"]["fingerprint"]
    assert run["executor"]["sequences_forwarded"] == 0  # every row was scored by the full run
    quarter = tofu(tmp_path, "quarter", "--limit", "0.25")
    assert quarter.returncode == 0, quarter.stderr
    assert len(json.loads((tmp_path / "quarter" / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]["value_by_index"]) == 10


@pytest.mark.parametrize("bad", ["2.5", "0", "-1", "x", "inf"])
def test_bad_limit_is_one_line(tmp_path, bad):
    proc = tofu(tmp_path, "out", f"--limit={bad}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"argument --limit: wants a whole number of rows or a fraction below 1, not {bad!r}" in lines[0]
    assert not (tmp_path / "out").exists()


def test_one_declaration_for_every_benchmark():
    text = run_cli(["run", "tofu", "muse", "lmeval", "--help"]).stdout
    assert text.count("\n  --limit N ") == 1 and "documents of every task (lmeval)" in " ".join(text.split())
