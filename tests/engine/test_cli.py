"""The command line: the default run, listing, the cache commands, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaldag.engine import cli
from evaldag.engine.registry import BENCHMARKS

from ..plugins import install

# the console script installed next to this interpreter (PATH may not hold the venv)
EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def test_default_run_then_warm_rerun(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    cmd = [EVALDAG, "run", "toy", "--out", str(out), "--cache-dir", str(cache)]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "toy_probability" in first.stdout and "computed" in first.stdout
    run_json = json.loads((out / "run.json").read_text())
    assert set(run_json) >= {"nodes", "executor", "wall_seconds", "provenance"}
    assert all(n["status"] == "computed" and n["reason"] == "new" for n in run_json["nodes"].values())
    assert run_json["executor"]["model_loaded"] is True
    summary = json.loads((out / "TOY_SUMMARY.json").read_text())
    evals = json.loads((out / "TOY_EVAL.json").read_text())
    assert summary["toy_probability"] == evals["toy_probability"]["agg_value"]
    assert set(evals["toy_probability"]["value_by_index"]) == {str(i) for i in range(6)}

    subprocess.run(cmd, capture_output=True, text=True, check=True)
    warm = json.loads((out / "run.json").read_text())
    assert all(n["status"] == "cached" and n["reason"] == "" for n in warm["nodes"].values())
    assert warm["executor"]["model_loaded"] is False
    assert json.loads((out / "TOY_SUMMARY.json").read_text()) == summary


def test_list_shows_benchmarks_with_their_metric_names_and_the_registered_metrics():
    out = subprocess.run([EVALDAG, "list"], capture_output=True, text=True, check=True).stdout
    assert "toy_probability" in out and "aggregator" in out and "scorer" in out
    benches, metrics = out.split("\nmetrics (registered")
    for name in ("toy", "tofu", "muse", "weat"):
        assert f"\n  {name} " in benches
    # the names `--metrics` takes, as it takes them: open-unlearning's node names, not metric functions
    assert "forget_truth_ratio" in benches and "mia: mia_loss, mia_zlib" in benches and "all: WEAT, RND, RNSB" in benches
    assert "forget_truth_ratio" not in metrics


def test_every_listed_metric_name_is_accepted_by_metrics():
    from evaldag.engine.registry import BENCHMARKS

    for name in BENCHMARKS.names():
        menu = BENCHMARKS.get(name).metric_menu()
        assert menu.parse(",".join(menu.all), bench=name) == tuple(menu.all)
        for group, members in menu.groups.items():
            assert menu.parse(group, bench=name) == members


def test_cache_commands(tmp_path, capsys):
    cache = tmp_path / "c"
    assert cli.main(["run", "toy", "--quiet", "--out", str(tmp_path / "o"), "--cache-dir", str(cache)]) == 0
    assert cli.main(["cache", "info", "--cache-dir", str(cache)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["nodes"] == 6 and info["requests"] == 12
    assert cli.main(["cache", "ls", "--cache-dir", str(cache)]) == 0
    listing = capsys.readouterr().out
    assert "toy_summary" in listing
    fp = json.loads((tmp_path / "o" / "run.json").read_text())["nodes"]["toy_summary"]["fingerprint"]
    assert cli.main(["cache", "explain", fp[:10], "--cache-dir", str(cache)]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["components"]["metric"] == "toy_summary" and set(meta["components"]["parents"]) == {"prob", "mink"}
    assert cli.main(["cache", "verify", "--cache-dir", str(cache)]) == 0
    assert cli.main(["cache", "prune", "--older-than", "1d", "--cache-dir", str(cache)]) == 0
    assert "pruned 0" in capsys.readouterr().out
    assert cli.main(["cache", "clear", "--yes", "--cache-dir", str(cache)]) == 0
    assert not cache.exists()


THIRD_PARTY = '''
"""A benchmark that lives outside evaldag: two metrics, one option, its own report section."""
import argparse

from pydantic import BaseModel

from evaldag.engine import Result, Rows, metric
from evaldag.engine.benchmark import Benchmark, MetricMenu
from evaldag.engine.render.report_html import Section


@metric("thirdbench_count", version="1", needs=("data",), register=False)
def count(data):
    return Result(float(len(data)), {str(i): {"len": len(r["text"])} for i, r in enumerate(data)})


@metric("thirdbench_fails", version="1", register=False)
def fails():
    raise RuntimeError("this metric always fails")


class ThirdConfig(BaseModel):
    rows: int = 3
    metrics: tuple[str, ...] = ("count",)


class ThirdBench(Benchmark):
    name = "thirdbench"
    group = "THIRD"
    description = "a third-party benchmark for the tests"
    Config = ThirdConfig

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--third-rows", type=int, default=3, help="thirdbench: how many rows")

    def config_from_args(self, args):
        return ThirdConfig(rows=args.third_rows, metrics=self.metrics_from_args(args))

    def metric_menu(self):
        return MetricMenu(default=("count",), all=("count", "fails"))

    def build(self, cfg):
        made = {"count": lambda: count(name="count", group="THIRD"), "fails": lambda: fails(name="fails", group="THIRD")}
        rows = [{"text": "x" * (i + 1)} for i in range(cfg.rows)]
        return [made[m]() for m in cfg.metrics], {"data": Rows(lambda: rows, source=f"third:{cfg.rows}")}

    def report_sections(self, runs):
        values = [r.summaries.get("THIRD", {}).get("count") for r in runs]
        return [Section("Third party", f\'<p id="third-values">{values}</p>\', order=40)]
'''


@pytest.fixture()
def third_party(tmp_path):
    """A dist-info on PYTHONPATH with an ``evaldag.benchmarks`` entry point, as pip would install it."""
    return install(tmp_path / "site", "thirdbench", {"thirdbench.py": THIRD_PARTY},
                   "[evaldag.benchmarks]\nthirdbench = thirdbench:ThirdBench\n")


def test_third_party_benchmark_runs_from_the_cli_and_in_the_report(third_party, tmp_path):
    listing = subprocess.run([EVALDAG, "list"], capture_output=True, text=True, check=True, env=third_party).stdout
    assert "thirdbench" in listing and "a third-party benchmark for the tests" in listing
    assert "    all: count, fails" in listing
    out = tmp_path / "o"
    cmd = [EVALDAG, "run", "thirdbench", "--third-rows", "4", "--out", str(out), "--cache-dir", str(tmp_path / "c"), "--quiet"]
    subprocess.run(cmd, capture_output=True, text=True, check=True, env=third_party)
    assert json.loads((out / "THIRD_SUMMARY.json").read_text()) == {"count": 4.0}
    assert json.loads((out / "run.json").read_text())["benchmarks"] == ["thirdbench"]
    page = (out / "report.html").read_text()
    assert '<p id="third-values">[4.0]</p>' in page and '<h2 id="third-party">Third party</h2>' in page
    assert '<a href="#third-party">Third party</a>' in page
    # `evaldag report` finds the benchmark from run.json too
    subprocess.run([EVALDAG, "report", str(out), "--out", str(tmp_path / "r.html")], check=True, env=third_party,
                   capture_output=True)
    assert '<p id="third-values">[4.0]</p>' in (tmp_path / "r.html").read_text()
    # an unknown --metrics name is refused before anything runs, naming what is known
    bad = subprocess.run(cmd[:-1] + ["--metrics", "nope"], capture_output=True, text=True, env=third_party)
    assert bad.returncode == 2 and "unknown THIRD metric 'nope'; known: count, fails" in bad.stderr


def test_failing_node_gives_nonzero_exit_and_is_reported(third_party, tmp_path):
    cmd = [EVALDAG, "run", "thirdbench", "--metrics", "count,fails", "--out", str(tmp_path / "o"),
           "--cache-dir", str(tmp_path / "c")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=third_party)
    assert done.returncode == 1
    assert "FAILED fails" in done.stdout and "this metric always fails" in done.stdout
    nodes = json.loads((tmp_path / "o" / "run.json").read_text())["nodes"]
    assert nodes["fails"]["status"] == "failed" and "RuntimeError" in nodes["fails"]["error"]
    assert nodes["count"]["status"] == "computed"
    assert json.loads((tmp_path / "o" / "THIRD_SUMMARY.json").read_text()) == {"count": 3.0}


def test_unknown_benchmark_is_one_line_exit_2(capsys):
    assert cli.main(["run", "nosuchbench"]) == 2
    err = capsys.readouterr().err
    assert {"editing", "muse", "probes", "tofu", "toy", "weat"} <= set(BENCHMARKS.names())
    assert err.count("\n") == 1 and f"unknown benchmark 'nosuchbench'; known: {', '.join(BENCHMARKS.names())}" in err


def test_a_closed_stdout_ends_quietly_and_sigpipe_stays_ignored(capsys):
    """`evaldag list | head -1`: no traceback; and the CLI leaves SIGPIPE ignored, so a
    distributed rank whose peer died gets an error it reports, not a silent -13 kill."""
    import signal

    p = subprocess.Popen([EVALDAG, "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # the reader is gone before the first write
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert cli.main(["list"]) == 0 and "tofu" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN


_MODULES_AFTER = """
import sys
from evaldag.engine.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write("\\n".join(sorted(m for m in sys.modules if m.startswith("evaldag.benchmarks"))))
raise SystemExit(code)
"""


def test_run_toy_imports_no_other_benchmark_or_command_module(tmp_path):
    """`evaldag run toy` imports the toy plugin and nothing else of benchmarks/: no command
    module (the demo, which runs TOFU) is loaded unless that command is run."""
    seen = tmp_path / "modules.txt"
    cmd = [sys.executable, "-c", _MODULES_AFTER, str(seen), "run", "toy", "--quiet",
           "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert seen.read_text().split("\n") == ["evaldag.benchmarks", "evaldag.benchmarks.toy"]


def test_a_command_module_is_loaded_for_its_own_command_and_top_level_help(capsys):
    """`evaldag demo --help` and `evaldag --help` show the demo command (its HELP is read then)."""
    with pytest.raises(SystemExit) as e:
        cli.main(["demo", "--help"])
    assert e.value.code == 0 and "--no-report" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0 and "evaluate the three bundled checkpoints on TOFU, offline" in " ".join(capsys.readouterr().out.split())
