"""docs/writing-a-benchmark.md §4: the plugin module, installed as a third party would, runs
from the CLI (`evaldag list`, `evaldag run mybench`, `evaldag graph mybench`), in the report,
and from Python, without a line of evaldag changed."""

import json
import re
import subprocess
import sys
from pathlib import Path

from ..plugins import install

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "writing-a-benchmark.md"
FIX = ROOT / "tests" / "fixtures"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def _section(text: str, heading: str) -> str:
    return re.search(rf"## {re.escape(heading)}\n(.*?)(?=\n## |\Z)", text, re.S).group(1)


def test_plugin_section_installs_and_runs(tmp_path):
    section = _section(DOC.read_text(), "4. Make it a plugin: the command line, `evaldag list` and the report")
    module, python_use = re.findall(r"```python\n(.*?)```", section, re.S)
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    site = tmp_path / "site"
    # pip writes the pyproject table as entry_points.txt: [group] and name = module:attr, unquoted
    eps = toml.replace('[project.entry-points."evaldag.benchmarks"]', "[evaldag.benchmarks]").replace('"', "")
    env = {**install(site, "mybench", {"mybench.py": module}, eps), "EVALDAG_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}

    listing = subprocess.run([EVALDAG, "list"], capture_output=True, text=True, check=True, env=env).stdout
    assert "mybench" in listing and "all: forget_PARA, forget_PERT, forget_TR" in listing
    plan = subprocess.run([EVALDAG, "graph", "mybench", "--metrics", "all"], capture_output=True, text=True, check=True, env=env).stdout
    assert plan.startswith("flowchart LR") and "forget_TR" in plan

    out = tmp_path / "out"
    cmd = [EVALDAG, "run", "mybench", "--mybench-data", str(FIX / "tofu_tiny"), "--model", str(FIX / "tiny-llama" / "target"),
           "--metrics", "all", "--out", str(out), "--quiet"]
    subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    summary = json.loads((out / "MYBENCH_SUMMARY.json").read_text())
    assert set(summary) == {"forget_PARA", "forget_PERT", "forget_TR"}
    page = (out / "report.html").read_text()
    assert '<h2 id="my-benchmark">My benchmark</h2>' in page and f"<td>{summary['forget_TR']}</td>" in page

    missing = subprocess.run(cmd[:3] + ["--out", str(tmp_path / "o2")], capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "mybench needs --mybench-data DIR and --model DIR" in missing.stderr

    # the §4 Python line builds the same graph: a run from Python finds every node in the cache
    code = (f"import sys; sys.path.insert(0, {str(site)!r})\nfrom mybench import MyBenchmark, MyConfig\nfrom evaldag.engine import run\n"
            + python_use.replace("TOFU/", str(FIX / "tofu_tiny")).replace("ckpt/", str(FIX / "tiny-llama" / "target"))
            + "res = run(nodes, resources)\nprint(res.count('cached'), res.count('computed'), res['forget_TR'].agg_value)\n")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout.split()
    assert got[:2] == ["5", "0"] and float(got[2]) == summary["forget_TR"]
