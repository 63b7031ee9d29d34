"""An unnamed ``@metric`` root: in summary(), in to_pandas(), and a KeyError that says how to reach it."""

import pytest

from evaldag.engine import Params, Result, metric, run


class Half(Params):
    x: float = 0.5


@metric("my_unnamed_metric", version="1", params=Half)
def my_unnamed_metric(params: Half) -> Result:
    return Result(agg_value=params.x)


def test_unnamed_root_is_in_the_table_and_named_by_label(tmp_path):
    pd = pytest.importorskip("pandas", reason="pandas is the evaldag[pandas] extra")
    result = run([my_unnamed_metric()], {}, cache=tmp_path / "c")
    (label, value), = result.summary().items()
    assert label.startswith("my_unnamed_metric[") and value == 0.5
    frame = result.to_pandas(run="mine")
    assert isinstance(frame, pd.DataFrame)
    assert frame[["run", "benchmark", "metric", "value"]].values.tolist() == [["mine", "RUN", label, 0.5]]
    assert result[label].agg_value == 0.5
    with pytest.raises(KeyError, match=r"no node named 'my_unnamed_metric': an unnamed node is found by its label "
                                       r"\(my_unnamed_metric\[[0-9a-f]+\]\); give it a name to use 'my_unnamed_metric': "
                                       r"my_unnamed_metric\(\.\.\., name='my_unnamed_metric'\)"):
        result["my_unnamed_metric"]
    named = run([my_unnamed_metric(name="my_unnamed_metric")], {}, cache=tmp_path / "c")
    assert named["my_unnamed_metric"].agg_value == 0.5


def test_to_pandas_names_the_run_and_step_as_export_does(tmp_path):
    """After its files are written, a result's table has export's run name and step."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("pandas", reason="pandas is the evaldag[pandas] extra")
    from evaldag.benchmarks.toy import ToyBenchmark, ToyConfig
    from evaldag.engine import write_report

    nodes, res = ToyBenchmark().build(ToyConfig())
    result = run(nodes, res, cache=tmp_path / "c")
    assert set(result.to_pandas().run) == {""}  # nothing written yet: no name to give
    out = tmp_path / "sweep" / "checkpoint-40"
    write_report(result, out)
    exported = subprocess.run([str(Path(sys.executable).with_name("evaldag")), "export", str(out), "--jsonl"],
                              capture_output=True, text=True, check=True).stdout
    want = sorted((r["run"], r["metric"], r["step"]) for r in map(json.loads, exported.splitlines()))
    frame = result.to_pandas()
    got = sorted(zip(frame.run, frame.metric, frame.step))
    assert got == want and want[0][0] == "checkpoint-40" and want[0][2] == 40
