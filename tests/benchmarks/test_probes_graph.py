"""Probes as graph nodes: replay through the executor, caching, re-scoring, bad input.

The recorded GenderBench attempts double as replay files: the graph must give
GenderBench's metrics and intervals, a warm rerun asks nothing, new mark ranges
recompute only the marks, and bad records or evaluators fail one probe with an error
that names probe, item, prompt and repetition while the other probes finish.
"""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from evaldag.benchmarks.probes import spec as probes_spec
from evaldag.benchmarks.probes.generators import CallableModel, ReplayModel
from evaldag.benchmarks.probes.spec import ProbesConfig, nodes, write_outputs
from evaldag.engine import run

FIX = Path(__file__).parents[1] / "fixtures" / "genderbench"
REF = {(r["probe"], r["params"]["calculate_cis"]): r for r in json.loads((FIX / "genderbench_reference_public.json").read_text())["runs"]}
OPTIONS = {"direct": {"num_repetitions": 2}, "discrimination_tamkin": {"num_repetitions": 1}}


def recorded(name: str) -> list[dict]:
    with gzip.open(FIX / f"genderbench_attempts_{name}.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def write_replay(path: Path, records: list[dict]) -> Path:
    with gzip.open(path, "wt") as f:
        for r in records:
            f.write(json.dumps({k: r[k] for k in ("prompt_text", "repetition_id", "answer")}) + "\n")
    return path


@pytest.fixture(scope="module")
def replay_file(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("replay")
    return write_replay(d / "answers.jsonl.gz", recorded("DirectProbe_rep2") + recorded("DiscriminationTamkinProbe_rep1"))


@pytest.fixture(scope="module")
def first_run(replay_file, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = ProbesConfig(probes=("direct", "discrimination_tamkin"), options=OPTIONS)
    res = run(nodes(cfg), {"model": ReplayModel(replay_file)}, cache=cache)
    return cfg, res, cache


def test_replay_run_gives_genderbench_numbers(first_run, tmp_path):
    cfg, res, _ = first_run
    assert res.ok
    # every attempt is one request; replay answers each one (duplicate texts included)
    assert res.executor["requests"] == 7888 + 6252 == res.executor["unique"]
    write_outputs(res, tmp_path, cfg)
    summary = json.loads((tmp_path / "PROBES_SUMMARY.json").read_text())
    evals = json.loads((tmp_path / "PROBES_EVAL.json").read_text())
    for probe in ("DirectProbe", "DiscriminationTamkinProbe"):
        for k, v in REF[(probe, False)]["metrics"].items():
            assert summary[f"{probe}/{k}"] == pytest.approx(v, abs=1e-9)
        for k, v in REF[(probe, True)]["metrics"].items():
            assert evals[probe]["intervals"][k] == pytest.approx(v, abs=1e-9)
        assert {k: m["mark_value"] for k, m in evals[probe]["marks"].items()} == \
            {k: m["mark_value"] for k, m in REF[(probe, True)]["marks"].items()}


def test_warm_rerun_and_rescoring_never_ask_the_model(first_run, replay_file, monkeypatch):
    cfg, _, cache = first_run
    warm = run(nodes(cfg), {"model": ReplayModel(replay_file)}, cache=cache)
    assert warm.count("computed") == 0 and warm.executor["requests"] == 0
    # new mark ranges: only the marks nodes run again
    from evaldag.benchmarks.probes.direct import DirectProbe
    from evaldag.metrics.probes import MarkDefinition

    monkeypatch.setattr(DirectProbe, "mark_definitions", [MarkDefinition("fail_rate", [0, 0.3, 0.4, 0.5, 1], [], "stricter")])
    res = run(nodes(cfg), {"model": ReplayModel(replay_file)}, cache=cache)
    assert res.executor["requests"] == 0
    assert [r.name for r in res.records.values() if r.status == "computed"] == ["DirectProbe"]
    assert res.value("PROBES/DirectProbe").extra["marks"]["fail_rate"]["mark_value"] == 0
    # a new evaluator (code digest): evaluations and everything after recompute, attempts stay cached
    monkeypatch.setattr(probes_spec, "code_digest", lambda cls: "new-evaluator")
    res = run(nodes(cfg), {"model": ReplayModel(replay_file)}, cache=cache)
    assert res.executor["requests"] == 0
    assert res.record("PROBES/DirectProbe.attempts").status == "cached"
    assert res.record("PROBES/DirectProbe.evaluations").status == "computed"


def test_bad_replay_record_fails_its_probe_only(tmp_path):
    recs = recorded("DiscriminationTamkinProbe_rep1")[:30]
    recs[4] = {**recs[4], "answer": 7}
    path = write_replay(tmp_path / "bad.jsonl.gz", recs + recorded("DirectProbe_rep2"))
    cfg = ProbesConfig(probes=("direct", "discrimination_tamkin"), options=OPTIONS, calculate_cis=False)
    res = run(nodes(cfg), {"model": ReplayModel(path)}, cache=tmp_path / "c")
    rec = res.record("PROBES/DiscriminationTamkinProbe.attempts")
    assert rec.status == "failed"
    assert "DiscriminationTamkinProbe: item 1, prompt 1, repetition 0" in rec.error
    assert "'answer' must be a string, got int" in rec.error and "bad.jsonl.gz:5" in rec.error
    assert res.record("PROBES/DirectProbe").status == "computed"


def test_missing_prompt_names_probe_item_prompt(tmp_path):
    path = write_replay(tmp_path / "part.jsonl.gz", recorded("DirectProbe_rep2")[:-1])
    cfg = ProbesConfig(probes=("direct",), options=OPTIONS, calculate_cis=False)
    res = run(nodes(cfg), {"model": ReplayModel(path)}, cache=tmp_path / "c")
    reason = res.record("PROBES/DirectProbe.attempts").error
    assert "DirectProbe: item 3943, prompt 0, repetition 1" in reason and "has 1 record(s) for this prompt" in reason


def test_replay_with_more_repetitions_than_asked_says_so(replay_file, tmp_path):
    cfg = ProbesConfig(probes=("direct",), calculate_cis=False, options={"direct": {"num_repetitions": 1}})
    res = run(nodes(cfg), {"model": ReplayModel(replay_file)}, cache=tmp_path / "c")
    assert "pass --num-repetitions 2" in res.record("PROBES/DirectProbe.attempts").error


def test_evaluator_error_and_empty_answers(tmp_path, monkeypatch):
    """An empty answer is undetected (as in GenderBench); an evaluator that raises names the attempt."""
    answers = {}

    def generator(texts):
        return ["" if "kidney" in t else answers.get(t, "No.") for t in texts]

    cfg = ProbesConfig(probes=("direct", "discrimination_tamkin"), sample_k=40, calculate_cis=False,
                       options={"direct": {"num_repetitions": 1}, "discrimination_tamkin": {"num_repetitions": 1}})
    from evaldag.metrics.probes import YesNoEvaluator

    original = YesNoEvaluator.calculate_evaluation

    calls = {"n": 0}

    def flaky(self, attempt):
        if self.probe.name == "DirectProbe":
            calls["n"] += 1
            if calls["n"] == 3:  # the third attempt: item 2 (one prompt, one repetition)
                raise RuntimeError("boom")
        return original(self, attempt)

    monkeypatch.setattr(YesNoEvaluator, "calculate_evaluation", flaky)
    res = run(nodes(cfg), {"model": CallableModel(generator, name="empty-test")}, cache=tmp_path / "c")
    tamkin = res.value("PROBES/DiscriminationTamkinProbe.metrics")
    assert tamkin["undetected_rate_attempts"] > 0
    rec = res.record("PROBES/DirectProbe.evaluations")
    assert rec.status == "failed" and "DirectProbe: item 2, prompt 0, repetition 0" in rec.error
    assert "RuntimeError: boom" in rec.error
    assert res.record("PROBES/DiscriminationTamkinProbe").status == "computed"


def test_callable_generator_bounded_concurrency_and_retries(tmp_path):
    lock, state = threading.Lock(), {"active": 0, "peak": 0, "calls": 0, "texts": 0}

    def api(texts):
        with lock:
            state["calls"] += 1
            first = state["calls"] == 1
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
        try:
            if first:
                raise ConnectionError("transient")
            threading.Event().wait(0.01)
            with lock:
                state["texts"] += len(texts)
            return ["Yes." for _ in texts]
        finally:
            with lock:
                state["active"] -= 1

    model = CallableModel(api, name="fake-api", max_concurrency=2, batch_size=5, retries=2, retry_delay=0.0)
    cfg = ProbesConfig(probes=("direct",), sample_k=30, calculate_cis=False, options={"direct": {"num_repetitions": 2}})
    res = run(nodes(cfg), {"model": model}, cache=tmp_path / "c")
    assert res.ok
    assert res.value("PROBES/DirectProbe.metrics")["fail_rate"] == 1.0
    # 30 items x 2 repetitions: every attempt asked once; the failed first chunk was retried
    assert state["peak"] <= 2 and state["texts"] == 60 and model.calls == state["calls"]


def test_a_nan_headline_says_why_in_the_terminal_and_the_files(tmp_path, capsys):
    """Answers no evaluator can read: the headline is NaN, and the terminal gives SUMMARY's reason."""
    from evaldag.engine.outputs.terminal import print_run

    cfg = ProbesConfig(probes=("discrimination_tamkin",), sample_k=10, calculate_cis=False,
                       options={"discrimination_tamkin": {"num_repetitions": 1}})
    res = run(nodes(cfg), {"model": CallableModel(lambda texts: ["zzz"] * len(texts), name="unreadable")},
              cache=tmp_path / "c")
    why = "undetected_rate_attempts = 1.0: the evaluator could read none of the answers"
    assert res.value("PROBES/DiscriminationTamkinProbe").reason == why
    write_outputs(res, tmp_path / "out", cfg)
    summary = json.loads((tmp_path / "out" / "PROBES_SUMMARY.json").read_text())
    assert {v["reason"] for v in summary.values() if isinstance(v, dict)} == {why}
    print_run(res)
    line = next(x for x in capsys.readouterr().out.splitlines() if "DiscriminationTamkinProbe " in x)
    assert "nan" in line and why in line and "no reason given" not in line
