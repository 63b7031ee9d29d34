"""Declaring metrics, building graphs, fingerprints and graph errors."""

import numpy as np
import pytest

from evaldag.engine import DeclarationError, Graph, GraphError, Params, Result, Rows, metric, run
from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine.fingerprint import FingerprintError, hash_value
from evaldag.engine.resources import MissingResource


class K(Params):
    k: int = 1


@metric("g_src", version="1", params=K, register=False, needs=("data",))
def g_src(data, params):
    return Result(float(len(data) * params.k))


@metric("g_child", version="1", register=False, parents={"a": g_src()})
def g_child(a):
    return Result(a.agg_value + 1)


def test_identical_nodes_merge_into_one_vertex():
    n1 = g_child(parents={"a": g_src(k=2)}, name="one")
    n2 = g_child(parents={"a": g_src(k=2)}, name="two")
    g = Graph([n1, n2])
    assert len(g) == 2  # one source, one child with two names
    assert sorted(n for _, n in g.find("one").names) == ["one", "two"]


def test_different_params_are_different_vertices():
    g = Graph([g_child(parents={"a": g_src(k=1)}, name="x"), g_child(parents={"a": g_src(k=2)}, name="y")])
    assert len(g) == 4


def test_two_configs_under_one_display_name_is_an_error():
    with pytest.raises(GraphError, match="two different configurations under one display name 'dup'"):
        Graph([g_src(k=1, name="dup"), g_src(k=2, name="dup")])


def test_unknown_parent_names_it_and_who_asked():
    @metric("g_orphan", version="1", register=False, parents={"p": "no_such_metric"})
    def orphan(p):
        return p

    with pytest.raises(GraphError, match=r"unknown parent 'no_such_metric' \(asked by g_orphan as 'p'\)"):
        Graph([orphan()])


def test_cycle_lists_every_node_on_it():
    @metric("cyc_a", version="1", parents={"b": "cyc_b"})
    def cyc_a(b):
        return b

    @metric("cyc_b", version="1", parents={"c": "cyc_c"})
    def cyc_b(c):
        return c

    @metric("cyc_c", version="1", parents={"a": "cyc_a"})
    def cyc_c(a):
        return a

    with pytest.raises(GraphError) as e:
        Graph([cyc_a()])
    msg = str(e.value)
    assert "cycle" in msg and all(n in msg for n in ("cyc_a", "cyc_b", "cyc_c"))


def test_missing_resource_is_an_error_before_any_model_loads(tmp_path):
    model = ToyModel()

    @metric("g_needs", version="1", register=False, needs=("model", "tofu_forget"))
    def needs(model, tofu_forget):
        yield []
        return 0

    with pytest.raises(GraphError, match=r"missing resource\(s\): 'tofu_forget' \(needed by g_needs"):
        run([needs()], {"model": model}, cache_dir=tmp_path)
    assert model.loads == 0


def test_invalid_params_name_the_metric():
    with pytest.raises(DeclarationError, match="invalid params for metric g_src"):
        g_src(k="not an int")
    with pytest.raises(DeclarationError, match="invalid params"):
        g_src(unknown=3)


def test_function_arguments_must_match_the_declaration():
    with pytest.raises(DeclarationError, match="'b' is neither a parent key"):

        @metric("g_bad", version="1", register=False, parents={"a": "x"})
        def bad(a, b):
            return a


def test_fingerprint_is_strict_and_type_tagged():
    assert hash_value(1) != hash_value(1.0) != hash_value("1") != hash_value(True)
    assert hash_value([1, 2]) != hash_value((1, 2))
    a = np.arange(6, dtype=np.float32)
    assert hash_value(a) != hash_value(a.reshape(2, 3)) != hash_value(a.astype(np.float64))
    assert hash_value({"b": 1, "a": 2}) == hash_value({"a": 2, "b": 1})
    with pytest.raises(FingerprintError, match="cannot fingerprint"):
        hash_value(object())


def test_fingerprint_follows_resource_content_not_name(tmp_path):
    rows = [{"q": 1}, {"q": 2}]
    g1 = Graph([g_src(k=3, name="s")])
    g1.fingerprint(_rs({"data": Rows(lambda: rows)}))
    g2 = Graph([g_src(k=3, name="s", bind={"data": "other"})])
    g2.fingerprint(_rs({"other": Rows(lambda: list(rows))}))
    assert g1.find("s").fingerprint == g2.find("s").fingerprint
    g3 = Graph([g_src(k=3, name="s")])
    g3.fingerprint(_rs({"data": Rows(lambda: rows + [{"q": 3}])}))
    assert g3.find("s").fingerprint != g1.find("s").fingerprint


def test_explain_shows_components(tmp_path):
    g = Graph([g_child(parents={"a": g_src(k=4)}, name="c")])
    g.fingerprint(_rs({"data": [1, 2]}))
    ex = g.explain("c")
    assert ex["metric"] == "g_child" and ex["version"] == "1" and ex["params"] == {}
    assert ex["parents"]["a"]["fingerprint"] == g.vertices[g.find("c").parent_keys["a"]].fingerprint
    src = g.explain(g.find("c").parent_keys["a"])
    assert src["params"] == {"k": 4} and src["resources"]["data"]["bound_to"] == "data"


def test_missing_resource_error_type_from_resource_set():
    from evaldag.engine.resources import ResourceSet

    with pytest.raises(MissingResource, match="missing resource 'x' \\(needed by me\\)"):
        ResourceSet({}).get("x", "me")


def _rs(d):
    from evaldag.engine.resources import ResourceSet

    return ResourceSet(d)
