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
