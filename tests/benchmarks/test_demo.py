"""`evaldag demo` end to end on the bundled assets: the numbers tell the right story."""

import json

import pytest

from evaldag.engine import cli


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    argv = ["demo", "--out", str(tmp / "out"), "--cache-dir", str(tmp / "cache")]
    assert cli.main(argv) == 0
    summaries = {m: json.loads((tmp / "out" / m / "TOFU_SUMMARY.json").read_text()) for m in ("target", "unlearned", "retain")}
    assert cli.main(argv) == 0  # warm
    return tmp / "out", summaries


def test_forget_quality_and_probability_order_the_checkpoints(demo):
    _, s = demo
    assert s["retain"]["forget_quality"] > s["unlearned"]["forget_quality"] > s["target"]["forget_quality"]
    assert s["retain"]["forget_quality"] == pytest.approx(1.0)  # the retain model against itself
    assert s["target"]["forget_Q_A_Prob"] > s["unlearned"]["forget_Q_A_Prob"] > s["retain"]["forget_Q_A_Prob"]
    assert s["target"]["mia_loss"] > 0.95 and s["retain"]["mia_loss"] < 0.6
    assert s["retain"]["privleak"] == pytest.approx(0.0, abs=1e-6)


def test_second_run_is_warm_and_loads_no_weights(demo):
    out, s = demo
    for m in ("target", "unlearned", "retain"):
        run = json.loads((out / m / "run.json").read_text())
        assert run["executor"]["model_loaded"] is False and run["executor"]["requests"] == 0
        assert all(n["status"] == "cached" for n in run["nodes"].values())
        assert json.loads((out / m / "TOFU_SUMMARY.json").read_text()) == s[m]
    html = (out / "report.html").read_text()
    assert "<script src=" not in html and "http://" not in html.replace("http://www.w3.org", "")
    assert html.count("<svg") >= 5


def test_the_demo_runs_are_recorded_in_the_cache(demo, capsys):
    out, _ = demo
    capsys.readouterr()
    assert cli.main(["cache", "runs", "--cache-dir", str(out.parent / "cache")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6  # three checkpoints, cold then warm
    for line, m in zip(lines, ["target", "unlearned", "retain"] * 2):
        assert f"out={out / m}" in line and "$ evaldag demo" in line and f"models/{m} " in line
