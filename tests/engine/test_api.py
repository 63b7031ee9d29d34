"""The rest of the declaration API: providers, stateful metrics, entry points, NaN results."""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from evaldag.engine import Metric, Params, Result, metric, provider, run, write_report
from evaldag.engine.declare import REGISTRY

PROVIDED = []

# the console script installed next to this interpreter (PATH may not hold the venv)
EVALDAG = str(Path(sys.executable).with_name("evaldag"))


@provider("api_doubled", version="1", needs=("numbers",))
def api_doubled(numbers):
    PROVIDED.append(1)
    return [2 * x for x in numbers]


@metric("api_uses_doubled", version="1", register=False, needs=("api_doubled",))
def uses_doubled(api_doubled):
    return Result(float(sum(api_doubled)))


@metric("api_plain", version="1", register=False, needs=("numbers",))
def plain(numbers):
    return Result(float(len(numbers)))


def test_provider_runs_lazily_once_and_only_when_needed(tmp_path):
    PROVIDED.clear()
    res = run([plain(name="p")], {"numbers": [1, 2, 3]}, cache_dir=tmp_path)
    assert res["p"].agg_value == 3.0 and PROVIDED == []
    res = run([uses_doubled(name="a"), uses_doubled(name="b", group="G")], {"numbers": [1, 2, 3]}, cache_dir=tmp_path / "2")
    assert res["a"].agg_value == 12.0 and PROVIDED == [1]
    # its fingerprint follows its inputs: new numbers, new result
    res = run([uses_doubled(name="a")], {"numbers": [1, 2, 4]}, cache_dir=tmp_path / "2")
    assert res["a"].agg_value == 14.0 and res.record("a").status == "computed"


class Offset(Params):
    offset: float = 0.0


class Counter(Metric):
    """A stateful metric: the instance keeps a call count across runs in one process."""

    name = "api_counter"
    version = "1"
    Params = Offset
    needs = ("numbers",)

    def __init__(self):
        self.calls = 0

    def compute(self, numbers, params):
        self.calls += 1
        return Result(float(sum(numbers)) + params.offset)


def test_stateful_metric_class(tmp_path):
    """One instance serves every node of the class; its state lasts across runs, and a
    cached node does not call it."""
    state = Counter.instance
    start = state.calls
    res = run([Counter.metric(offset=0.5, name="c")], {"numbers": [1, 2]}, cache_dir=tmp_path)
    assert res["c"].agg_value == 3.5 and state.calls == start + 1
    again = run([Counter.metric(offset=0.5, name="c")], {"numbers": [1, 2]}, cache_dir=tmp_path)
    assert again.record("c").status == "cached" and state.calls == start + 1
    other = run([Counter.metric(offset=1.5, name="c")], {"numbers": [1, 2]}, cache_dir=tmp_path)
    assert other["c"].agg_value == 4.5 and state.calls == start + 2
    assert REGISTRY.get("api_counter") is Counter.metric and Counter.metric.kind == "aggregator"
    assert Counter.metric.fn.__self__ is state


def test_nan_results_keep_their_reason_through_the_report(tmp_path):
    @metric("api_nan", version="1", register=False)
    def nan_metric():
        return Result(float("nan"), {"0": {"score": float("nan")}}, reason="every item had 0 scored tokens")

    res = run([nan_metric(name="n", group="X")], {}, cache_dir=tmp_path)
    write_report(res, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "X_EVAL.json").read_text())
    # NaN is not JSON: null, the reason beside it (EVAL: the Result's; SUMMARY: value + reason)
    assert data["n"]["agg_value"] is None and data["n"]["reason"] == "every item had 0 scored tokens"
    assert data["n"]["value_by_index"] == {"0": {"score": None}}
    assert json.loads((tmp_path / "out" / "X_SUMMARY.json").read_text())["n"] == \
        {"value": None, "reason": "every item had 0 scored tokens"}
    again = run([nan_metric(name="n", group="X")], {}, cache_dir=tmp_path)
    assert again.record("n").status == "cached" and again["n"].reason == "every item had 0 scored tokens"


def test_third_party_metrics_register_through_entry_points(tmp_path):
    (tmp_path / "thirdparty_metrics.py").write_text(
        textwrap.dedent(
            '''
            from evaldag.engine import Result, metric

            @metric("thirdparty_answer", version="1")
            def thirdparty_answer():
                """Always 42."""
                return Result(42.0)
            '''
        )
    )
    dist = tmp_path / "thirdparty_metrics-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-metrics\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[evaldag.metrics]\nanswer = thirdparty_metrics\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([EVALDAG, "list"], capture_output=True, text=True, check=True, env=env).stdout
    assert "thirdparty_answer" in out and "Always 42." in out
    code = "from evaldag.engine import run; from evaldag.engine.declare import REGISTRY; m = REGISTRY.get('thirdparty_answer'); print(run([m(name='t')], {}, cache_dir=%r)['t'].agg_value)" % str(tmp_path / "c")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout.strip() == "42.0"
    # and from the CLI, beside a built-in benchmark: its value lands in the run's own files
    o = tmp_path / "o"
    subprocess.run([EVALDAG, "run", "toy", "--add-metric", "thirdparty_answer", "--quiet", "--out", str(o),
                    "--cache-dir", str(tmp_path / "c")], capture_output=True, text=True, check=True, env=env)
    assert json.loads((o / "RUN_SUMMARY.json").read_text()) == {"thirdparty_answer": 42.0}
    assert json.loads((o / "RUN_EVAL.json").read_text())["thirdparty_answer"]["agg_value"] == 42.0
    assert "toy_summary" in json.loads((o / "TOY_SUMMARY.json").read_text())
    bad = subprocess.run([EVALDAG, "run", "toy", "--add-metric", "nope", "--out", str(o)], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "--add-metric nope: no registered metric" in bad.stderr
