"""report.html in a real browser: headless Chromium renders it, runs its script, logs no error.

String checks on the HTML cannot tell whether a browser draws it, so this test opens the
report in headless Chromium (Debian package ``chromium``), reads back the DOM after the
script ran (``--dump-dom``), watches the console log, and takes a screenshot for people
to look at. It is skipped only when no Chromium binary is installed.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import networkx as nx
import pytest

from evaldag.engine.report import write_report_html

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (CI installs it: apt-get install -y chromium)")


def _render_tests():
    """The TOFU-shaped toy run and fixture folders defined in test_render.py (one definition)."""
    spec = importlib.util.spec_from_file_location("_evaldag_render_tests", Path(__file__).with_name("test_render.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--no-first-run", f"--user-data-dir={profile}",
           "--enable-logging=stderr", "--v=0", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def console_lines(stderr: str, page: Path) -> list[str]:
    """Console messages and uncaught errors that came from ``page`` (our script logs nothing)."""
    return [line for line in stderr.splitlines()
            if ("CONSOLE" in line or "Uncaught" in line) and (page.name in line or "Uncaught" in line or "ERROR:CONSOLE" in line)]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_console_capture_catches_a_script_error(tmp_path):
    """The control: if the capture missed errors, the report test below would prove nothing."""
    page = tmp_path / "broken.html"
    page.write_text('<html><body><p>x</p><script>throw new Error("boom-sentinel")</script></body></html>')
    done = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert any("boom-sentinel" in line for line in console_lines(done.stderr, page))


def test_report_renders_with_every_plot_and_no_script_error(tmp_path):
    rt = _render_tests()
    base = tmp_path / "runs"
    rt.run_tofu_like(base / "out", base / "cache")
    target, retain = rt.fake_out_dirs(base, base / "out")
    report = write_report_html([target, retain], tmp_path / "report.html")
    run_nodes = json.loads((target / "run.json").read_text())["nodes"]

    done = chromium(tmp_path, "--dump-dom", report.as_uri() + "#ed-selftest")
    dom = done.stdout
    assert console_lines(done.stderr, report) == []
    assert re.search(r'<body[^>]*data-ed-ready="1"', dom), "the page script did not finish"
    dags = re.findall(r'<svg[^>]*class="ed-dag[^"]*".*?</svg>', dom, re.S)
    assert len(dags) == 2  # target open, retain inside <details>
    assert len(re.findall(r'<g class="ed-node ', dags[0])) == len(run_nodes) >= 55
    assert len(re.findall(r'<path class="ed-edge[ "]', dags[0])) == sum(len(set(n["parents"].values())) for n in run_nodes.values())
    for kind in ("truth-ratio", "roc", "prob"):
        plots = re.findall(rf'<svg[^>]*class="ed-plot" data-plot="{kind}".*?</svg>', dom, re.S)
        assert len(plots) == 2, kind
        assert all('class="ed-series"' in p for p in plots), kind
    assert len(re.findall(r'<polyline class="ed-series"', dom)) == 12  # six attacks, two runs

    # the self-test clicked the last box: it and everything up- and downstream light up
    node_id, lit_nodes, lit_edges, sort, first_row = re.search(r'data-ed-selftest="([^"]*)"', dom).group(1).split(",")
    names = {re.search(rf'data-id="{i}" data-status="[^"]*" data-name="([^"]*)"', dags[0]).group(1): i
             for i in re.findall(r'<g class="ed-node [^"]*" id="ed0-(\w+)"', dags[0])}
    g = nx.DiGraph([(p, n) for n, e in run_nodes.items() for p in e["parents"].values()])
    g.add_nodes_from(run_nodes)
    label = {n: n.split("/", 1)[-1] for n in run_nodes}
    clicked = next(n for n in run_nodes if names.get(label[n]) == node_id)
    expect = {clicked} | nx.ancestors(g, clicked) | nx.descendants(g, clicked)
    assert int(lit_nodes) == len(expect) > 1
    assert int(lit_edges) == g.subgraph(expect).number_of_edges()
    assert sort == "descending" and first_row  # the name column sorted twice: descending

    shot = tmp_path / "shot.png"
    done = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,2000", report.as_uri())
    assert console_lines(done.stderr, report) == []
    assert png_size(shot) == (1400, 2000) and shot.stat().st_size > 50_000


def test_weat_report_renders_its_bars_with_no_script_error(tmp_path):
    """A WEAT run's report: the fairness table, one bar per word in every chart, no console error."""
    spec = importlib.util.spec_from_file_location("_evaldag_fairness_tests", Path(__file__).parents[1] / "benchmarks" / "test_render_fairness.py")
    ft = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ft)
    out = tmp_path / "weat"
    assert ft.run_weat(out, tmp_path / "cache") == 0
    report = write_report_html([out], tmp_path / "report.html")
    evals = json.loads((out / "WEAT_EVAL.json").read_text())
    words = sum(sum(len(ws) for ws in m["WEAT"].get("s_by_word", {}).values()) + len(m["RNSB"]["negative_sentiment_probabilities"])
                + sum(len(ws) for ws in m["MAC"]["targets_eval"].values()) for m in evals.values())

    done = chromium(tmp_path, "--dump-dom", report.as_uri() + "#ed-selftest")
    dom = done.stdout
    assert console_lines(done.stderr, report) == []
    assert re.search(r'<body[^>]*data-ed-ready="1"', dom), "the page script did not finish"
    table = re.search(r'<table class="ed-table ed-sortable ed-fair".*?</table>', dom, re.S).group(0)
    assert len(re.findall(r"<tr>", table)) == 1 + len(evals)
    assert len(re.findall(r"<details[^>]*ed-fair-q", dom)) == len(evals)
    assert len(re.findall(r'<g class="ed-bar"', dom)) == words > 500
    assert len(re.findall(r'<svg[^>]*class="ed-plot" data-plot="weat-s"', dom)) == 7  # WEAT 4, 5, 10 are NaN here

    shot = tmp_path / "weat.png"
    done = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,2000", report.as_uri())
    assert console_lines(done.stderr, report) == []
    assert png_size(shot) == (1200, 2000) and shot.stat().st_size > 50_000


def test_three_checkpoints_fit_a_1400_px_page(tmp_path):
    """Column headers name each run by its folder and its model's last part (the full paths on
    hover): three checkpoints with long absolute paths fit, the retain column included."""
    rt = _render_tests()
    base = tmp_path / "runs"
    rt.run_tofu_like(base / "out", base / "cache")
    target, retain = rt.fake_out_dirs(base, base / "out")
    unlearned = base / "unlearned"
    shutil.copytree(target, unlearned)
    deep = "/very/long/absolute/path/of/a/cluster/filesystem/where/checkpoints/are/kept/by/default"
    for d in (target, unlearned, retain):
        run = json.loads((d / "run.json").read_text())
        run["provenance"].setdefault("resources", {})["model"] = {"kind": "model", "path": f"{deep}/{d.name}-checkpoint-1200",
                                                                    "fingerprint": "ab" * 32}
        (d / "run.json").write_text(json.dumps(run))
    report = write_report_html([target, unlearned, retain], tmp_path / "report.html")
    html = report.read_text()
    assert f'title="{retain}\nmodel: {deep}/retain-checkpoint-1200"' in html  # the full paths on hover
    assert "retain-checkpoint-1200 · abababababab" in html
    probe = tmp_path / "probe.html"  # the report, then a script that writes what the browser laid out
    probe.write_text(html.replace("</body>", "<script>window.addEventListener('load', () => {"
                                  "const t = document.querySelector('table.ed-metrics');"
                                  "const r = t.getBoundingClientRect();"
                                  "document.body.setAttribute('data-table-right', Math.ceil(r.right));"
                                  "document.body.setAttribute('data-page-width', document.documentElement.clientWidth);"
                                  "});</script></body>"))
    done = chromium(tmp_path, "--window-size=1400,1000", "--virtual-time-budget=3000", "--dump-dom", probe.as_uri())
    right = int(re.search(r'data-table-right="(\d+)"', done.stdout).group(1))
    width = int(re.search(r'data-page-width="(\d+)"', done.stdout).group(1))
    assert right <= width <= 1400, (right, width)
