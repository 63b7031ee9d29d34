"""docs/prompt-transforms.md's worked example runs as written and prints what the page says."""

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "prompt-transforms.md"


def test_worked_example(tmp_path, capsys, monkeypatch):
    section = re.search(r"## A worked example\n(.*?)\n## ", DOC.read_text(), re.S).group(1)
    code = re.findall(r"```python\n(.*?)```", section, re.S)
    printed = re.findall(r"```text\n(.*?)```", section, re.S)
    assert len(code) == len(printed) == 2
    monkeypatch.chdir(ROOT)  # the page's paths are the repository's
    ns = {"CACHE": str(tmp_path / "cache"), "__name__": "doc_prompt_transforms"}
    for block, want in zip(code, printed):
        exec(compile(block, str(DOC), "exec"), ns)
        assert capsys.readouterr().out == want
    assert os.path.isdir(ns["CACHE"])
