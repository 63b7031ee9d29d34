"""Tables out and run comparison: `evaldag export`, `evaldag compare`,
`RunResult.to_pandas()`, and the report's delta column."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..inprocess import run_cli


def _evaldag(*args, check=True) -> subprocess.CompletedProcess:
    """The command in the test's process (``check``: a non-zero exit fails, as ``subprocess.run(check=True)``)."""
    done = run_cli(list(args))
    if check:
        done.check_returncode()
    return done


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory):
    """Two toy runs (seeds 0 and 1) as a sweep's OUT holds them: OUT/s0/, OUT/s1/."""
    root = tmp_path_factory.mktemp("runs")
    for seed in (0, 1):
        _evaldag("run", "toy", "--toy-seed", seed, "--out", root / "sweep" / f"s{seed}", "--cache-dir", root / "cache")
    return root


def _summary(folder: Path) -> dict:
    return json.loads((folder / "TOY_SUMMARY.json").read_text())


def _tofu_folder(path: Path, summary: dict, model: str = "/ckpt/unlearned") -> Path:
    """A TOFU run folder as a run publishes it (the two files export reads)."""
    path.mkdir(parents=True)
    (path / "TOFU_SUMMARY.json").write_text(json.dumps(summary))
    (path / "run.json").write_text(json.dumps({"nodes": {}, "benchmarks": ["tofu"], "provenance": {
        "resources": {"model": {"kind": "model", "path": model}}, "models": {"model": "abc"}}}))
    return path


def test_export_csv_of_a_sweep_has_one_row_per_metric_per_run(toy_runs):
    sweep = toy_runs / "sweep"
    out = _evaldag("export", sweep, "--csv").stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["run", "model", "benchmark", "metric", "split", "value", "step"]
    for seed in (0, 1):
        mine = {r["metric"]: float(r["value"]) for r in rows if r["run"] == f"s{seed}"}
        assert mine == pytest.approx(_summary(sweep / f"s{seed}"))
        assert {r["benchmark"] for r in rows if r["run"] == f"s{seed}"} == {"TOY"}
    assert len(rows) == 2 * len(_summary(sweep / "s0"))


def test_export_jsonl_to_a_file_and_several_folders(toy_runs, tmp_path):
    sweep = toy_runs / "sweep"
    dest = tmp_path / "all.jsonl"
    done = _evaldag("export", sweep / "s0", sweep / "s1", "--jsonl", "--out", dest)
    assert done.stdout == "" and f"-> {dest}" in done.stderr
    rows = [json.loads(line) for line in dest.read_text().splitlines()]
    assert {r["run"] for r in rows} == {"s0", "s1"}
    assert {r["metric"]: r["value"] for r in rows if r["run"] == "s1"} == pytest.approx(_summary(sweep / "s1"))


def test_split_and_model_come_from_the_benchmark_vocabulary_and_provenance(tmp_path):
    run = _tofu_folder(tmp_path / "unlearned", {"forget_Q_A_Prob": 0.5, "ra_Q_A_Prob": 0.25, "retain_Truth_Ratio": 0.75,
                                                "model_utility": 0.125, "forget_quality": float("nan")})
    rows = [json.loads(x) for x in _evaldag("export", run, "--jsonl").stdout.splitlines()]
    by = {r["metric"]: r for r in rows}
    assert {m: r["split"] for m, r in by.items()} == {
        "forget_Q_A_Prob": "forget", "ra_Q_A_Prob": "ra", "retain_Truth_Ratio": "retain",
        "model_utility": "", "forget_quality": "forget"}
    assert {r["model"] for r in rows} == {"/ckpt/unlearned"} and {r["benchmark"] for r in rows} == {"TOFU"}
    assert by["forget_quality"]["value"] is None  # strict JSON: NaN is null
    assert by["model_utility"]["value"] == 0.125


def test_export_of_a_folder_without_a_run_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, says in ((["export", tmp_path / "empty"], "not a run folder"),
                       (["export", tmp_path / "nope"], "no such folder")):
        done = _evaldag(*args, check=False)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("evaldag: error: ") and says in done.stderr


def test_parquet_needs_pandas_or_says_which_extra(toy_runs, tmp_path):
    dest = tmp_path / "t.parquet"
    code = ("import sys; sys.modules['pandas'] = None\n"  # as if pandas were not installed
            "from evaldag.engine.cli import main; raise SystemExit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "export", str(toy_runs / "sweep"), "--parquet", "--out", str(dest)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and not dest.exists()
    assert done.stderr == "evaldag: error: --parquet needs pandas: pip install 'evaldag[pandas]'\n"
    # CSV needs no pandas
    done = subprocess.run([sys.executable, "-c", code, "export", str(toy_runs / "sweep"), "--csv"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("run,model,benchmark,metric,split,value,step\n")


def test_parquet_round_trips(toy_runs, tmp_path):
    pd = pytest.importorskip("pandas", reason="pandas is the evaldag[pandas] extra")
    pytest.importorskip("pyarrow", reason="pyarrow is the evaldag[pandas] extra")
    dest = tmp_path / "t.parquet"
    _evaldag("export", toy_runs / "sweep", "--parquet", "--out", dest)
    frame = pd.read_parquet(dest)
    assert list(frame.columns) == ["run", "model", "benchmark", "metric", "split", "value", "step"]
    s0 = frame[frame.run == "s0"].set_index("metric")["value"].to_dict()
    assert s0 == pytest.approx(_summary(toy_runs / "sweep" / "s0"))


def test_to_pandas_is_the_long_table_of_the_summary(tmp_path):
    pd = pytest.importorskip("pandas", reason="pandas is the evaldag[pandas] extra")
    from evaldag.benchmarks.toy import ToyBenchmark, ToyConfig
    from evaldag.engine import run

    nodes, res = ToyBenchmark().build(ToyConfig())
    result = run(nodes, res, cache=tmp_path / "c")
    frame = result.to_pandas(run="mine")
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["run", "model", "benchmark", "metric", "split", "value", "step"]
    assert frame.set_index("metric")["value"].to_dict() == pytest.approx(result.summary("TOY"))
    assert set(frame.run) == {"mine"} and set(frame.benchmark) == {"TOY"}


def test_compare_prints_and_writes_the_difference(toy_runs, tmp_path):
    a, b = toy_runs / "sweep" / "s0", toy_runs / "sweep" / "s1"
    sa, sb = _summary(a), _summary(b)
    done = _evaldag("compare", a, b, "--out", tmp_path / "d.json")
    name = "toy_probability"
    line = next(x for x in done.stdout.splitlines() if x.startswith(f"TOY/{name} "))
    assert line.split()[1:] == [f"{sa[name]:.4g}", f"{sb[name]:.4g}", f"{sb[name] - sa[name]:+.4g}"]
    saved = json.loads((tmp_path / "d.json").read_text())
    got = {r["metric"]: r["delta"] for r in saved["metrics"]}
    assert got == pytest.approx({k: sb[k] - sa[k] for k in sa})
    _evaldag("compare", a, b, "--out", tmp_path / "d.csv")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "d.csv").read_text())))
    assert {r["metric"]: float(r["delta"]) for r in rows} == pytest.approx({k: sb[k] - sa[k] for k in sa})


def test_compare_names_a_metric_only_one_side_has(tmp_path):
    a = _tofu_folder(tmp_path / "a", {"forget_Q_A_Prob": 0.5, "privleak": 10.0})
    b = _tofu_folder(tmp_path / "b", {"forget_Q_A_Prob": 0.25})
    out = _evaldag("compare", a, b).stdout.splitlines()
    assert out[3].split() == ["TOFU/forget_Q_A_Prob", "0.5", "0.25", "-0.25"]
    assert out[4].split() == ["TOFU/privleak", "10", "-", "-"]


def test_the_report_of_two_runs_has_a_delta_column(toy_runs, tmp_path):
    a, b = toy_runs / "sweep" / "s0", toy_runs / "sweep" / "s1"
    _evaldag("report", a, b, "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    d = _summary(b)["toy_probability"] - _summary(a)["toy_probability"]
    assert "ed-delta" in page and f">{d:+.4g}</td>" in page
