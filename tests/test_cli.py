"""The command line: the default run, listing, the cache commands, exit codes."""

import json
import subprocess
import sys
import types
from pathlib import Path

from evaldag.engine import Result, cli, metric

# the console script installed next to this interpreter (PATH may not hold the venv)
EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def test_default_run_then_warm_rerun(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    cmd = [EVALDAG, "run", "--out", str(out), "--cache-dir", str(cache)]
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


def test_list_shows_registered_metrics():
    out = subprocess.run([EVALDAG, "list"], capture_output=True, text=True, check=True).stdout
    assert "toy_probability" in out and "aggregator" in out and "scorer" in out


def test_cache_commands(tmp_path, capsys):
    cache = tmp_path / "c"
    assert cli.main(["run", "--quiet", "--out", str(tmp_path / "o"), "--cache-dir", str(cache)]) == 0
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


def test_failing_node_gives_nonzero_exit_and_is_reported(tmp_path, monkeypatch, capsys):
    @metric("cli_fails", version="1", register=False)
    def fails():
        raise RuntimeError("this metric always fails")

    @metric("cli_fine", version="1", register=False)
    def fine():
        return Result(1.0)

    mod = types.ModuleType("failing_bench")
    mod.add_arguments = lambda parser: None
    mod.build = lambda args: ([fails(name="bad", group="F"), fine(name="good", group="F")], {})
    monkeypatch.setitem(sys.modules, "failing_bench", mod)
    monkeypatch.setitem(cli.BENCHMARKS, "failing", "failing_bench")
    code = cli.main(["run", "failing", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])
    assert code == 1
    out = capsys.readouterr().out
    assert "FAILED bad" in out and "this metric always fails" in out
    nodes = json.loads((tmp_path / "o" / "run.json").read_text())["nodes"]
    assert nodes["bad"]["status"] == "failed" and "RuntimeError" in nodes["bad"]["error"]
    assert nodes["good"]["status"] == "computed"
    assert json.loads((tmp_path / "o" / "F_SUMMARY.json").read_text()) == {"good": 1.0}
