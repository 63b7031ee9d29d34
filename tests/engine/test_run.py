"""Running graphs: call counts, warm reruns, recompute reasons, failures, scorers."""

import numpy as np
import pytest

from evaldag.engine import Params, Result, Rows, TokenStats, metric, run
from evaldag.engine.adapters.toy import ToyModel

CALLS: dict[str, int] = {}


def count(name):
    CALLS[name] = CALLS.get(name, 0) + 1


class Scale(Params):
    scale: float = 1.0


@metric("r_parent", version="1", params=Scale, register=False, needs=("data",))
def r_parent(data, params):
    count("parent")
    return Result(float(sum(data)) * params.scale, {str(i): {"x": float(x)} for i, x in enumerate(data)})


@metric("r_mean", version="1", register=False, parents={"p": r_parent()})
def r_mean(p):
    count("mean")
    return Result(float(np.mean([v["x"] for v in p.value_by_index.values()])))


@metric("r_max", version="1", register=False, parents={"p": r_parent()})
def r_max(p):
    count("max")
    return Result(max(v["x"] for v in p.value_by_index.values()))


@metric("r_double", version="1", params=Scale, register=False, parents={"p": r_parent()})
def r_double(p, params):
    count("double")
    return Result(2 * p.agg_value * params.scale)


@metric("r_top", version="1", register=False, parents={"a": r_double(), "b": r_mean()})
def r_top(a, b):
    count("top")
    return Result(a.agg_value + b.agg_value)


def graph(double_scale=1.0):
    return [r_mean(name="mean"), r_max(name="max"), r_top(parents={"a": r_double(scale=double_scale)}, name="top")]


@pytest.fixture(autouse=True)
def _reset():
    CALLS.clear()


def test_three_aggregators_share_one_parent_called_once(tmp_path):
    res = run(graph(), {"data": [1, 2, 3]}, cache_dir=tmp_path)
    assert res.ok
    assert CALLS["parent"] == 1
    assert res["mean"].agg_value == 2.0 and res["max"].agg_value == 3.0 and res["top"].agg_value == 14.0


def test_second_run_computes_nothing(tmp_path):
    first = run(graph(), {"data": [1, 2, 3]}, cache_dir=tmp_path)
    CALLS.clear()
    second = run(graph(), {"data": [1, 2, 3]}, cache_dir=tmp_path)
    assert second.count("computed") == 0 and second.count("cached") == len(second.records) == 5
    assert CALLS == {}
    assert second["top"].agg_value == first["top"].agg_value


def test_changing_params_recomputes_exactly_that_node_and_descendants(tmp_path):
    run(graph(), {"data": [1, 2, 3]}, cache_dir=tmp_path)
    CALLS.clear()
    res = run(graph(double_scale=3.0), {"data": [1, 2, 3]}, cache_dir=tmp_path)
    computed = {r.name for r in res.records.values() if r.status == "computed"}
    assert computed == {"r_double[" + res.graph.find("top").parent_keys["a"][:6] + "]", "top"}
    assert CALLS == {"double": 1, "top": 1}
    assert res.record("top").reason == "parent"
    assert res.records[res.graph.find("top").parent_keys["a"]].reason == "params"
    assert res["top"].agg_value == 2 * 6 * 3 + 2


def test_recompute_reasons_data_and_version(tmp_path):
    run(graph(), {"data": [1, 2, 3]}, cache_dir=tmp_path)
    res = run(graph(), {"data": [1, 2, 4]}, cache_dir=tmp_path)
    parent = res.records[res.graph.find("mean").parent_keys["p"]]
    assert parent.status == "computed" and parent.reason == "data"
    assert res.record("mean").reason == "parent"

    @metric("r_mean", version="2", register=False, parents={"p": r_parent()})
    def r_mean_v2(p):
        return Result(0.0)

    res = run([r_mean_v2(name="mean")], {"data": [1, 2, 4]}, cache_dir=tmp_path)
    assert res.record("mean").status == "computed" and res.record("mean").reason == "version"


def test_failure_skips_descendants_and_keeps_the_rest(tmp_path):
    @metric("r_boom", version="1", register=False, parents={"p": r_parent()})
    def boom(p):
        raise ZeroDivisionError("kaboom")

    @metric("r_after", version="1", register=False, parents={"b": boom()})
    def after(b):
        return b

    res = run([after(name="after"), r_mean(name="mean")], {"data": [1, 2]}, cache_dir=tmp_path)
    assert not res.ok
    boom_rec = res.records[res.graph.find("after").parent_keys["b"]]
    assert boom_rec.status == "failed" and "ZeroDivisionError: kaboom" in boom_rec.error
    assert res.record("after").status == "skipped" and res.record("after").problem == f"skipped: parent {boom_rec.name} failed"
    assert res.record("after").reason == boom_rec.reason == "new"  # reasons stay recompute reasons
    assert res.record("mean").status == "computed"
    again = run([r_mean(name="mean")], {"data": [1, 2]}, cache_dir=tmp_path)
    assert again.record("mean").status == "cached"


@metric("r_square_sum", version="1", params=Scale, register=False, parents={"p": r_parent()})
def r_square_sum(p, params):
    # self-contained (no test-module globals): it runs in a joblib worker process
    import os

    return Result(sum(v["x"] ** 2 for v in p.value_by_index.values()) * params.scale, extra={"pid": os.getpid()})


def test_parallel_aggregators_through_joblib(tmp_path):
    nodes = [r_square_sum(scale=float(s), name=f"sq{s}") for s in range(1, 5)]
    res = run(nodes, {"data": [1, 2, 3]}, cache_dir=tmp_path, n_jobs=2)
    assert res.ok and [res[f"sq{s}"].agg_value for s in range(1, 5)] == [14.0, 28.0, 42.0, 56.0]
    import os

    assert any(res[f"sq{s}"].extra["pid"] != os.getpid() for s in range(1, 5))  # really ran in workers


# --------------------------------------------------------------------- scorers


class Field(Params):
    field: str = "a"


@metric("r_stats", version="1", params=Field, register=False, needs=("model", "data"))
def r_stats(model, data, params):
    enc = model.encoder()
    reqs = [TokenStats(tuple(enc.encode("Q:", add_special_tokens=False)), tuple(enc.encode(row[params.field], add_special_tokens=False))) for row in data]
    res = yield reqs
    return [r.to_arrays() for r in res]


@metric("r_nll", version="1", register=False, parents={"s": r_stats()})
def r_nll(s):
    return Result(float(np.mean([-x["logprob"].mean() for x in s])))


@metric("r_argmax_hits", version="1", register=False, parents={"s": r_stats()})
def r_hits(s):
    return Result(float(np.mean([x["argmax"][0] for x in s])))


ROWS = [{"a": "hello", "b": "world"}, {"a": "hello", "b": "there"}, {"a": "abc", "b": "world"}]


def test_scorers_share_requests_and_a_warm_run_never_loads_the_model(tmp_path):
    model = ToyModel(seed=1)
    data = Rows(lambda: ROWS)
    nodes = [r_nll(name="nll_a"), r_hits(name="hits_a"), r_nll(parents={"s": r_stats(field="b")}, name="nll_b")]
    res = run(nodes, {"model": model, "data": data}, cache_dir=tmp_path)
    ex = res.executor
    assert res.ok and ex["requests"] == 6 and ex["unique"] == 4 and ex["sequences_forwarded"] == 4
    assert model.loads == 1
    warm_model = ToyModel(seed=1)
    warm = run(nodes, {"model": warm_model, "data": Rows(lambda: ROWS)}, cache_dir=tmp_path)
    assert warm.count("computed") == 0 and warm_model.loads == 0 and warm.executor["model_loaded"] is False
    # a changed aggregator recomputes from the node store, without touching the model
    cold_model = ToyModel(seed=1)
    res3 = run([r_hits(parents={"s": r_stats(field="b")}, name="hits_b")], {"model": cold_model, "data": data}, cache_dir=tmp_path)
    assert res3.record("hits_b").status == "computed" and cold_model.loads == 0


def test_same_subgraph_on_two_models_through_bind(tmp_path):
    a, b = ToyModel(seed=1), ToyModel(seed=2)
    nodes = [r_nll(name="on_a"), r_nll(name="on_b", bind={"model": "retain_model"})]
    res = run(nodes, {"model": a, "retain_model": b, "data": ROWS}, cache_dir=tmp_path)
    assert res["on_a"].agg_value != res["on_b"].agg_value
    # the retain model's node is found again when that model is the main one
    res2 = run([r_nll(name="on_a")], {"model": ToyModel(seed=2), "data": ROWS}, cache_dir=tmp_path)
    assert res2.record("on_a").status == "cached" and res2["on_a"].agg_value == res["on_b"].agg_value
    assert res2.record("on_a").fingerprint == res.record("on_b").fingerprint


def test_recompute_reason_model(tmp_path):
    run([r_nll(name="n")], {"model": ToyModel(seed=1), "data": ROWS}, cache_dir=tmp_path)
    res = run([r_nll(name="n")], {"model": ToyModel(seed=3), "data": ROWS}, cache_dir=tmp_path)
    assert res.records[res.graph.find("n").parent_keys["s"]].reason == "model"
    assert res.record("n").reason == "parent"


def test_scorer_multiple_rounds(tmp_path):
    from evaldag.engine import Generate, GenerationSettings

    @metric("r_two_rounds", version="1", register=False, needs=("model",))
    def two_rounds(model):
        enc = model.encoder()
        (gen,) = yield [Generate(tuple(enc.encode("Q: hi", add_special_tokens=False)), GenerationSettings(max_new_tokens=5))]
        (stats,) = yield [TokenStats(tuple(enc.encode("Q: hi", add_special_tokens=False)), tuple(int(t) for t in gen.token_ids))]
        return Result(float(stats.logprob.sum()), extra={"text": gen.text})

    res = run([two_rounds(name="t")], {"model": ToyModel()}, cache_dir=tmp_path)
    assert res.ok and res.executor["by_kind"]["generate"]["unique"] == 1
    # the same two steps by hand, on the model directly
    adapter = ToyModel().load()
    enc = ToyModel().encoder()
    (g,) = adapter.run_batch([Generate(tuple(enc.encode("Q: hi", add_special_tokens=False)), GenerationSettings(max_new_tokens=5))])
    (s,) = adapter.run_batch([TokenStats(tuple(enc.encode("Q: hi", add_special_tokens=False)), tuple(int(t) for t in g.token_ids))])
    assert res["t"].extra["text"] == g.text and res["t"].agg_value == pytest.approx(float(s.logprob.sum()))


def test_one_way_in_for_the_cache_and_the_executors_settings(tmp_path):
    """run() refuses contradictions instead of silently dropping one side: cache= with
    cache_dir=, or an executor together with progress / batch_tokens / deterministic
    that differ from its own. Settings equal to the executor's are no contradiction, and
    a deterministic executor marks the fingerprints deterministic without the flag."""
    from evaldag.engine.executor import Executor

    data = {"data": [1, 2, 3]}
    with pytest.raises(TypeError, match=r"run\(\): pass cache= or cache_dir=, not both"):
        run(graph(), data, cache=tmp_path, cache_dir=tmp_path)
    ex = Executor(batch_tokens=64)
    for kw, said in [({"batch_tokens": 128}, "batch_tokens=128"), ({"progress": True}, "progress=True"),
                     ({"deterministic": True}, "deterministic=True")]:
        with pytest.raises(TypeError) as e:
            run(graph(), data, cache=tmp_path, executor=ex, **kw)
        assert str(e.value).startswith(f"run(): {said} contradicts the executor given") and "Executor(" in str(e.value)
    assert CALLS == {}  # refused before any work
    res = run(graph(), data, cache=tmp_path, executor=ex, batch_tokens=64, progress=False)
    assert res.ok and res.provenance["execution"] == {"deterministic": False, "batch_tokens": 64,
                                                                  "prefix_sharing": True}
    scored = lambda: ([r_nll(name="n")], {"model": ToyModel(seed=1), "data": ROWS})  # noqa: E731
    det = run(*scored(), cache=tmp_path, executor=Executor(deterministic=True))
    assert det.provenance["execution"]["deterministic"] is True
    plain = run(*scored(), cache=tmp_path)
    assert [r.status for r in plain.records.values()] == ["computed"] * 2  # cached apart from the deterministic run
    assert {r.fingerprint for r in det.records.values()}.isdisjoint(r.fingerprint for r in plain.records.values())
