"""A user's own nodes in a benchmark's graph: rebinding, where results are written, finding them again."""

import json

import numpy as np
import pytest

from evaldag.benchmarks import toy as toy_bench
from evaldag.engine import Graph, GraphError, Result, Rows, TokenStats, cli, metric, run, unpack_token_stats, write_report
from evaldag.engine.adapters.base import PromptTemplate
from evaldag.engine.adapters.toy import ToyModel
from evaldag.metrics import toy as toy_metrics


@metric("user_mean_logprob", version="1", parents={"stats": "toy_answer_stats"})
def user_mean_logprob(stats):
    return Result(float(np.mean([s.logprob.mean() for s in unpack_token_stats(stats)])))


def _resources():
    return {"model": ToyModel(seed=0), "retain_model": ToyModel(seed=1), "data": Rows(lambda: toy_bench.ROWS)}


def _by_hand(seed):
    """The same number without the engine: mean over rows of the answer's mean token log-prob."""
    model, enc = ToyModel(seed=seed), ToyModel().encoder()
    adapter = model.load()
    reqs = [TokenStats(e.context_ids, e.continuation_ids) for e in
            (enc.encode_qa(r["question"], r["answer"], PromptTemplate()) for r in toy_bench.ROWS)]
    return float(np.mean([s.logprob.mean() for s in adapter.run_batch(reqs)]))


def test_with_bind_on_a_named_node_gets_a_qualified_name(tmp_path):
    prob = toy_metrics.toy_probability(name="prob", group="TOY")
    retain = prob.with_bind(model="retain_model")
    assert retain.name == "prob@retain_model" and retain.group == "TOY"
    assert prob.with_bind(model="model").name == "prob"  # no rename, no qualifier
    result = run([prob, retain], _resources(), cache_dir=tmp_path / "cache")
    assert result.ok
    assert result["TOY/prob"].agg_value != result["TOY/prob@retain_model"].agg_value
    # the rebound side is the same metric on the other model: what the retain model alone gives
    alone = run([toy_metrics.toy_probability(name="prob", group="TOY")],
                {"model": ToyModel(seed=1), "data": Rows(lambda: toy_bench.ROWS)}, cache_dir=tmp_path / "cache")
    assert alone.count("cached") == len(alone.records)  # found again by fingerprint
    assert alone["prob"].agg_value == result["TOY/prob@retain_model"].agg_value
    write_report(result, tmp_path / "out")
    evals = json.loads((tmp_path / "out" / "TOY_EVAL.json").read_text())
    assert set(evals) == {"prob", "prob@retain_model"}


def test_a_rebound_node_reached_through_the_same_binding_is_not_qualified_twice():
    retain = toy_metrics.toy_probability(name="prob").with_bind(model="retain_model")
    child = toy_metrics.toy_summary(name="summary", parents={"prob": retain}, bind={"model": "retain_model"})
    g = Graph([child])
    assert sorted(n for v in g.vertices.values() for _, n in v.names) == ["prob@retain_model", "summary"]


def test_a_name_clash_that_differs_only_by_binding_says_so():
    a = toy_metrics.toy_probability(name="prob")
    b = toy_metrics.toy_probability(name="prob", bind={"model": "retain_model"})
    with pytest.raises(GraphError, match=r"'prob'.*toy_probability\(\{\}\) vs toy_probability\(\{\}, bind=\{'model': 'retain_model'\}\)"):
        Graph([a, b])


def test_ungrouped_user_metric_is_written_under_the_run_name(tmp_path):
    nodes = toy_bench.nodes() + [user_mean_logprob(name="my_logprob")]
    result = run(nodes, _resources(), cache_dir=tmp_path / "cache")
    assert result.ok
    write_report(result, tmp_path / "a")
    files = sorted(p.name for p in (tmp_path / "a").iterdir() if p.name != ".evaldag")  # .evaldag: the sets behind the names
    # write_report writes the report its name promises
    assert files == ["RUN_EVAL.json", "RUN_SUMMARY.json", "TOY_EVAL.json", "TOY_SUMMARY.json", "report.html", "run.json"]
    expected = _by_hand(0)
    assert json.loads((tmp_path / "a" / "RUN_EVAL.json").read_text()) == {"my_logprob": {"agg_value": pytest.approx(expected, rel=1e-6)}}
    assert json.loads((tmp_path / "a" / "RUN_SUMMARY.json").read_text()) == {"my_logprob": pytest.approx(expected, rel=1e-6)}
    toy_summary = json.loads((tmp_path / "a" / "TOY_SUMMARY.json").read_text())
    assert set(toy_summary) == set(toy_bench.DEFAULT_METRICS)  # the benchmark's file is untouched
    # a run name that is not a group's names the file; one that is a group's falls back to RUN
    write_report(result, tmp_path / "b", bench="mine")
    assert (tmp_path / "b" / "MINE_EVAL.json").exists() and not (tmp_path / "b" / "RUN_EVAL.json").exists()
    write_report(result, tmp_path / "c", bench="toy")
    assert (tmp_path / "c" / "RUN_EVAL.json").exists()
    assert set(json.loads((tmp_path / "c" / "TOY_EVAL.json").read_text())) == set(toy_bench.DEFAULT_METRICS)


def test_a_graph_without_groups_still_writes_one_pair(tmp_path):
    result = run([user_mean_logprob(name="my_logprob")], _resources(), cache_dir=tmp_path / "cache")
    write_report(result, tmp_path / "o", bench="mine")
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if p.name != ".evaldag") == ["MINE_EVAL.json", "MINE_SUMMARY.json", "report.html", "run.json"]


def test_cache_explain_accepts_names_as_runs_print_them(tmp_path, capsys):
    cache, out = tmp_path / "c", tmp_path / "o"
    assert cli.main(["run", "toy", "--quiet", "--out", str(out), "--cache-dir", str(cache)]) == 0
    nodes = json.loads((out / "run.json").read_text())["nodes"]
    bracket = next(n for n in nodes if n.startswith("toy_answer_stats["))  # an unnamed node's id
    for what, fp in ((bracket, nodes[bracket]["fingerprint"]), ("toy_summary", nodes["toy_summary"]["fingerprint"]),
                     ("TOY/toy_min_k", nodes["toy_min_k"]["fingerprint"])):
        capsys.readouterr()
        assert cli.main(["cache", "explain", what, "--cache-dir", str(cache)]) == 0, what
        assert json.loads(capsys.readouterr().out)["fingerprint"] == fp
    assert cli.main(["cache", "explain", "no_such_node", "--cache-dir", str(cache)]) == 2
    # the same name on another model: the newest entry is shown, the other one is listed
    assert cli.main(["run", "toy", "--quiet", "--toy-seed", "1", "--out", str(tmp_path / "o1"), "--cache-dir", str(cache)]) == 0
    newest = json.loads((tmp_path / "o1" / "run.json").read_text())["nodes"]["toy_summary"]["fingerprint"]
    capsys.readouterr()
    assert cli.main(["cache", "explain", "toy_summary", "--cache-dir", str(cache)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["fingerprint"] == newest
    assert nodes["toy_summary"]["fingerprint"] in captured.err
