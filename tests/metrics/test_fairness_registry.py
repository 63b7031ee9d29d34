"""The fairness registry: WEFE's six metrics by name, and a new metric declared in one place.

``test_a_metric_declared_in_one_place_runs`` is the recipe of docs/fairness.md "Adding a
metric": formula and one declaration (engine node and registry entry), nothing else edited. It registers into a
copy of the registry so other tests still see exactly WEFE's six.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from evaldag.engine import Result, run
from evaldag.engine.declare import REGISTRY
from evaldag.metrics.fairness import registry
from evaldag.metrics.fairness.cosine import cosine_matrix
from evaldag.metrics.fairness.embeddings import WordVectorsResource
from evaldag.metrics.fairness.lookup import QueryLookup
from evaldag.metrics.fairness.registry import (
    MetricSettings,
    TemplateError,
    as_result,
    check_lookup,
    fairness_metric,
    fitting_metrics,
    metric_names,
    nan_result,
    query_nodes,
)
from evaldag.metrics.fairness.rnd import RndParams
from evaldag.metrics.fairness.vectors import WordVectors
from evaldag.metrics.fairness.word_sets import VERSION, lookup_from_value

VECTORS = WordVectors(["a", "c", "b", "d", "x", "y"],
                      [[1, 0], [1, 1], [0, 1], [-1, 0], [1, 0], [3, 4]])
QUERY = {"target_sets": {"T1": ["a", "c"], "T2": ["b", "d"]}, "attribute_sets": {"A": ["x", "y"]}}


def test_wefe_metrics_are_registered_in_wefe_order_with_wefe_templates():
    assert metric_names() == ("WEAT", "RND", "RNSB", "MAC", "ECT", "RIPA")
    assert {m: registry.get(m).template for m in metric_names()} == {
        "WEAT": (2, 2), "RND": (2, 1), "RNSB": ("n", 2), "MAC": ("n", "n"), "ECT": (2, 1), "RIPA": (2, 1)}
    assert fitting_metrics((2, 1)) == ["RND", "MAC", "ECT", "RIPA"]
    assert fitting_metrics((3, 2)) == ["RNSB", "MAC"]
    with pytest.raises(ValueError, match="unknown WEFE metric 'XYZ'; known: WEAT, RND"):
        registry.get("XYZ")


def test_each_fairness_metric_is_declared_once():
    """One declaration per metric: the registry entry names the engine node its own
    decorator declared, and no module declares that node a second time with @metric."""
    nodes = {m: registry.get(m).node for m in metric_names()}
    assert nodes == {"WEAT": "wefe_weat", "RND": "wefe_rnd", "RNSB": "wefe_rnsb", "MAC": "wefe_mac",
                     "ECT": "wefe_ect", "RIPA": "wefe_ripa"}
    for name, node in nodes.items():
        declared = REGISTRY.get(node)
        assert declared is not None and declared.fn.__module__ == f"evaldag.metrics.fairness.{name.lower()}"
    folder = Path(registry.__file__).parent
    by_metric = [dec.args[0].value for f in folder.glob("*.py") for d in ast.walk(ast.parse(f.read_text()))
                 if isinstance(d, ast.FunctionDef) for dec in d.decorator_list
                 if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "metric" and dec.args]
    assert by_metric and not set(by_metric) & set(nodes.values()), by_metric


def test_metric_settings_take_options_by_metric_name_and_default_the_rest():
    s = MetricSettings(rnd={"distance": "cos"})
    assert s.options_for("RND") == RndParams(distance="cos")
    assert s.options_for("RNSB").random_state == 0 and s.options_for("MAC") is None
    with pytest.raises(ValueError, match="no fairness metric with options is called 'mac'"):
        MetricSettings(mac={})
    with pytest.raises(ValueError, match="distance"):
        MetricSettings(rnd={"distance": "manhattan"})


@pytest.fixture
def simgap(monkeypatch):
    """A made-up metric, declared as a new module would declare it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    def sim_gap(lookup: QueryLookup) -> dict[str, Any]:
        check_lookup("SIMGAP", lookup)
        if not lookup.ok:
            return nan_result("SIMGAP", lookup)
        (t1, t2), (a,) = lookup.targets, lookup.attributes
        value = float(np.mean(cosine_matrix(t1.vectors, a.vectors), dtype=np.float64)
                      - np.mean(cosine_matrix(t2.vectors, a.vectors), dtype=np.float64))
        return {"query_name": lookup.query_name, "result": value, "sim_gap": value}

    @fairness_metric("SIMGAP", node="test_sim_gap", version=VERSION, template=(2, 1),
                     nan_fields={"sim_gap": math.nan}, register=False)
    def sim_gap_node(lookup: dict[str, Any]) -> Result:
        return as_result(sim_gap(lookup_from_value(lookup)))


def test_a_metric_declared_in_one_place_runs(simgap, tmp_path):
    assert metric_names()[-1] == "SIMGAP" and "SIMGAP" in fitting_metrics((2, 1))
    result = run(query_nodes("q", QUERY, ["SIMGAP", "RND"]), {"embeddings": WordVectorsResource(VECTORS)},
                 cache_dir=tmp_path)
    # T1 = a (1,0), c (1,1); T2 = b (0,1), d (-1,0); A = x (1,0), y (3,4)
    t1 = [1.0, 3 / 5, 1 / math.sqrt(2), 7 / (5 * math.sqrt(2))]
    t2 = [0.0, 4 / 5, -1.0, -3 / 5]
    out = result["WEAT/q/SIMGAP"]
    assert out.agg_value == pytest.approx(sum(t1) / 4 - sum(t2) / 4, abs=1e-6)
    assert out.extra["query_name"] == "T1 and T2 wrt A" and out.extra["sim_gap"] == out.agg_value
    assert [n.name for n in query_nodes("q", QUERY)] == ["q/RND", "q/MAC", "q/ECT", "q/RIPA", "q/SIMGAP"]


def test_a_new_metric_gets_template_checks_and_nan_results(simgap, tmp_path):
    wrong = {"target_sets": QUERY["target_sets"], "attribute_sets": {"A": ["x"], "B": ["y"]}}
    with pytest.raises(TemplateError, match=r"node 'WEAT/w/SIMGAP': SIMGAP takes 2 target set\(s\) and 1"):
        query_nodes("w", wrong, ["SIMGAP"])
    oov = {"target_sets": {"T1": ["a", "zz"], "T2": ["b", "d"]}, "attribute_sets": {"A": ["x", "y"]}}
    out = run(query_nodes("o", oov, ["SIMGAP"]), {"embeddings": WordVectorsResource(VECTORS)},
              cache_dir=tmp_path)["WEAT/o/SIMGAP"]
    assert math.isnan(out.agg_value) and math.isnan(out.extra["sim_gap"])
    assert "target set 'T1' lost 1 of 2 words" in out.reason
