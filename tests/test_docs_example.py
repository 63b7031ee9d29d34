"""The worked example in docs/writing-a-metric.md runs, as written."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing-a-metric.md"


def test_worked_example_runs(tmp_path, capsys):
    text = DOC.read_text()
    block = re.search(r"## A worked example\n\n```python\n(.*?)```", text, re.S).group(1)
    ns = {"CACHE": str(tmp_path), "__name__": "doc_example"}
    # the example registers metrics by name; give them fresh names so tests stay independent
    exec(compile(block, str(DOC), "exec"), ns)
    out = capsys.readouterr().out.split()
    assert len(out) == 3 and all(float(x) > 0 for x in out)
    assert ns["again"].count("cached") == 5
