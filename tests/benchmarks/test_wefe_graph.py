"""WEFE's metrics as graph nodes: WEFE 1.0.1's numbers through the engine, shared work, the CLI.

The reference cases (tests/fixtures/wefe/) are the ones test_wefe_math.py checks on
the pure functions; here every one of them goes through ``query_nodes`` and
``evaldag.engine.run`` -- all cases of a file in *one* graph, so the sharing the
engine does between them is exercised too.
"""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from evaldag.benchmarks.weat import spec
from evaldag.engine import Graph, Result, cli, run
from evaldag.metrics.fairness import Query, TemplateError, lookup_query
from evaldag.metrics.fairness.embeddings import WordVectorsResource, load_npz
from evaldag.metrics.fairness.lookup import LookupOptions
from evaldag.metrics.fairness.registry import MetricSettings, query_nodes, wefe_fields
from evaldag.metrics.fairness.rnd import RndParams
from evaldag.metrics.fairness.rnsb import RnsbParams
from evaldag.metrics.fairness.vectors import WordVectors
from evaldag.metrics.fairness.weat import WeatOptions
from evaldag.metrics.fairness.weat_p_value import PValueParams
from evaldag.metrics.fairness.word_sets import HFSource, lookup_from_value, set_node

from ..conftest_models import one_thread, resource, tokenizer
from ..wefe_compare import FLOAT32_ATOL, RNSB_ATOL, worst_diff

# the module, not the package's ``weat`` function of the same name
weat_module = importlib.import_module("evaldag.metrics.fairness.weat")

FIX = Path(__file__).parents[1] / "fixtures" / "wefe"
NPZ = FIX / "wefe_subset.npz"
PUBLIC = json.loads((FIX / "wefe_reference_public.json").read_text())["results"]
EXTRA = json.loads((FIX / "wefe_reference_extra.json").read_text())
WORD_SETS = json.loads((FIX / "wefe_word_sets.json").read_text())
LOOKUP_ARGS = ("lost_vocabulary_threshold", "preprocessors", "strategy", "normalize")

# -- helpers ------------------------------------------------------------------------------
def case_inputs(case: dict) -> tuple[LookupOptions, MetricSettings]:
    """A reference case's WEFE arguments as the graph's lookup options and metric settings."""
    args = dict(case["args"])
    look = {k: args.pop(k) for k in LOOKUP_ARGS if k in args}
    if "preprocessors" in look:  # "str.lower" in the JSON stands for the callable str.lower
        look["preprocessors"] = [
            {k: getattr(str, v[4:]) if k == "preprocessor" else v for k, v in p.items()} for p in look["preprocessors"]
        ]
    seed = case.get("numpy_default_rng_patched_seed", case.get("numpy_global_seed"))
    weat = WeatOptions(
        return_effect_size=args.pop("return_effect_size", False),
        calculate_p_value=args.pop("calculate_p_value", False),
        p_value=PValueParams(method="wefe", random_state=seed,
                             iterations=args.pop("p_value_iterations", 10000),
                             test_type=args.pop("p_value_test_type", "right-sided")),
    )
    rnsb = RnsbParams(random_state=args.pop("random_state", seed), holdout=args.pop("holdout", True),
                      n_iterations=args.pop("n_iterations", 1))
    rnd = RndParams(distance=args.pop("distance", "norm"))
    assert not args, f"argument(s) this test does not map: {args}"
    return LookupOptions(**look), MetricSettings(weat=weat, rnsb=rnsb, rnd=rnd)


def run_cases(cases: list[dict], queries: dict, vectors: Any, cache: Path):
    """Every case as its own query id in one graph; returns the run and each case's node name."""
    graph_nodes, names = [], []
    for i, case in enumerate(cases):
        lookup, settings = case_inputs(case)
        qid = f"case{i}"
        graph_nodes += query_nodes(qid, queries[case["query_id"]], [case["metric"]], lookup=lookup, settings=settings)
        names.append(f"WEAT/{qid}/{case['metric']}")
    return run(graph_nodes, {"embeddings": WordVectorsResource(vectors)}, cache_dir=cache), names


@pytest.fixture(scope="module")
def vectors() -> WordVectors:
    return load_npz(NPZ)


@pytest.fixture(scope="module")
def vectors_extra(vectors) -> WordVectors:
    extra = EXTRA["extra_vectors"]
    return WordVectors(list(vectors.words) + list(extra),
                       np.vstack([vectors.matrix, np.array(list(extra.values()), np.float32)]))


# -- fidelity through the graph ------------------------------------------------------------
def test_public_reference_through_one_graph(vectors, tmp_path):
    cases = [c for c in PUBLIC if "output" in c]
    result, names = run_cases(cases, WORD_SETS, vectors, tmp_path)
    assert result.ok, [f.error for f in result.failures()]
    for case, name in zip(cases, names, strict=True):
        ours = wefe_fields(result[name])
        assert worst_diff(ours, case["output"]) <= (RNSB_ATOL if case["metric"] == "RNSB" else FLOAT32_ATOL), name
        if case["args"].get("calculate_p_value"):  # WEFE's sampler, replayed: the same p exactly
            assert ours["p_value"] == pytest.approx(case["output"]["p_value"], abs=1e-15)
    # 24 cases on 3 queries: far fewer set lookups than (case x set)
    assert sum(v.metric.name == "wefe_word_set" for v in result.graph.vertices.values()) < 4 * len(cases) / 2


def test_extra_reference_through_one_graph(vectors_extra, tmp_path):
    """All 349 recorded WEFE cases (RND, ECT, RIPA, preprocessors, NaN, seeds) in one run."""
    queries = {k: Query.from_dict(v) for k, v in EXTRA["queries"].items()}
    result, names = run_cases(EXTRA["cases"], queries, vectors_extra, tmp_path)
    failed = 0
    for case, name in zip(EXTRA["cases"], names, strict=True):
        rec = result.record(name)
        if "error" in case:  # WEFE raised IndexError (RIPA, T2 shorter after OOV removal)
            assert rec.status == "failed" and "RipaPairingError" in rec.error, name
            failed += 1
            continue
        assert rec.status in ("computed", "cached"), (name, rec.error)
        ours = wefe_fields(result[name])
        assert worst_diff(ours, case["output"]) <= (RNSB_ATOL if case["metric"] == "RNSB" else FLOAT32_ATOL), name
        if case["args"].get("calculate_p_value"):
            assert ours["p_value"] == pytest.approx(case["output"]["p_value"], abs=1e-15)
        if case["output"]["result"] is None:
            assert "reason" in ours and ours["reason"], name
    assert failed == sum("error" in c for c in EXTRA["cases"]) == 8


def test_graph_lookup_equals_the_phase1_lookup(vectors, tmp_path):
    """The query lookup node (composed from set nodes) is lookup_query on the full vocabulary."""
    opts = LookupOptions(preprocessors=[{}, {"lowercase": True}], lost_vocabulary_threshold=0.1)
    for qid in ("oov_over_threshold", "oov_under_threshold", "weat9_mental_physical"):
        q = Query.model_validate(WORD_SETS[qid])
        result = run(query_nodes(qid, q, ["MAC"], lookup=opts), {"embeddings": WordVectorsResource(vectors)}, cache_dir=tmp_path)
        ours = lookup_from_value(result[f"WEAT/{qid}/lookup"])
        ref = lookup_query(vectors, q, **opts.lookup_kwargs())
        assert ours.reason == ref.reason
        for a, b in zip(ours.targets + ours.attributes, ref.targets + ref.attributes, strict=True):
            assert (a.name, a.found, a.missing, a.not_found, a.positions) == (b.name, b.found, b.missing, b.not_found, b.positions)
            np.testing.assert_array_equal(a.vectors, b.vectors)


def test_weat9_exact_p_value_is_the_recorded_one(vectors, tmp_path):
    q = WORD_SETS["weat9_mental_physical"]
    for method in ("auto", "exact"):
        settings = MetricSettings(weat=WeatOptions(p_value=PValueParams(method=method)))
        result = run(query_nodes("w9", q, ["WEAT"], settings=settings), {"embeddings": WordVectorsResource(vectors)}, cache_dir=tmp_path)
        out = wefe_fields(result["WEAT/w9/WEAT"])
        assert out["p_value"] == pytest.approx(6 / 924, abs=1e-15)  # 6 of C(12, 6) splits exceed it
        assert out["p_value_method"] == "exact" and out["p_value_random_state"] is None


# -- sharing ------------------------------------------------------------------------------
def test_shared_sets_cosines_and_s_vectors_are_one_vertex_and_run_once(vectors, tmp_path, monkeypatch):
    """Two queries on the same career/family attributes, one target set in common."""
    career_family = WORD_SETS["weat6_names_career_family"]
    names = dict(zip(career_family["target_sets_names"], career_family["target_sets"], strict=True))
    attrs = dict(zip(career_family["attribute_sets_names"], career_family["attribute_sets"], strict=True))
    flowers = WORD_SETS["weat1_flowers_insects"]["target_sets"][0][:8]
    q1 = {"target_sets": names, "attribute_sets": attrs}
    q2 = {"target_sets": {"Male names": names["Male names"], "Flowers": flowers}, "attribute_sets": attrs}
    calls = {"s": 0, "cos": 0}
    s_real, cos_real = weat_module.s_from_cosines, weat_module.cosine_matrix

    def count(key, fn):
        def wrapped(*a, **k):
            calls[key] += 1
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(weat_module, "s_from_cosines", count("s", s_real))
    monkeypatch.setattr(weat_module, "cosine_matrix", count("cos", cos_real))
    graph_nodes = query_nodes("q1", q1, ["WEAT"]) + query_nodes("q2", q2, ["WEAT"])
    g = Graph(graph_nodes)
    kinds: dict[str, int] = {}
    for v in g.vertices.values():
        kinds[v.metric.name] = kinds.get(v.metric.name, 0) + 1
    # 5 distinct sets, 3 targets x 2 attributes cosines, 3 (T, Career, Family) s vectors
    assert kinds == {"wefe_word_set": 5, "wefe_cosine": 6, "wefe_weat_s": 3, "wefe_lookup": 2,
                     "wefe_weat_effect_size": 2, "wefe_weat_p_value": 2, "wefe_weat": 2}
    shared_s = next(v for v in g.vertices.values() if v.metric.name == "wefe_weat_s"
                    and len(list(g.nx.successors(v.key))) == 6)  # s(Male names): WEAT, ES, p of both
    assert {g.vertices[c].metric.name for c in g.nx.successors(shared_s.key)} == {
        "wefe_weat", "wefe_weat_effect_size", "wefe_weat_p_value"}
    result = run(graph_nodes, {"embeddings": WordVectorsResource(vectors)}, cache_dir=tmp_path)
    assert result.ok and result.count("computed") == len(g) == 22
    assert calls == {"s": 3, "cos": 6}
    again = run(graph_nodes, {"embeddings": WordVectorsResource(vectors)}, cache_dir=tmp_path)
    assert again.count("computed") == 0 and calls == {"s": 3, "cos": 6}


def test_set_nodes_are_keyed_by_what_preprocessing_does(vectors):
    words = ["Rose", "tulip"]
    lower = LookupOptions(preprocessors=[{"lowercase": True}])
    same_effect = LookupOptions(preprocessors=[{"preprocessor": str.lower}])
    other = LookupOptions(preprocessors=[{"preprocessor": str.upper}])
    key = lambda opts: Graph([set_node(words, opts)]).roots[0]  # noqa: E731
    assert key(lower) == key(same_effect) != key(other)
    assert key(LookupOptions()) == key(LookupOptions(lost_vocabulary_threshold=0.5))  # a query-level rule


# -- templates, NaN -------------------------------------------------------------------------
def test_template_error_names_node_query_and_cardinalities():
    q3 = WORD_SETS["three_targets_pleasant"]
    with pytest.raises(TemplateError) as err:
        query_nodes("three", q3, ["MAC", "WEAT"])
    msg = str(err.value)
    assert "'WEAT/three/WEAT'" in msg and "Flowers, Insects and Instruments wrt Pleasant and Unpleasant" in msg
    assert "(2, 2)" in msg and "(3, 2)" in msg
    assert [n.name for n in query_nodes("three", q3)] == ["three/RNSB", "three/MAC"]  # only what fits
    with pytest.raises(TemplateError, match="fits no WEFE metric"):
        query_nodes("none", {"target_sets": [["a"]]})


def test_lost_vocabulary_gives_nan_with_a_reason_everywhere(vectors, tmp_path):
    q = WORD_SETS["oov_over_threshold"]
    result = run(query_nodes("oov", q), {"embeddings": WordVectorsResource(vectors)}, cache_dir=tmp_path)
    assert result.ok
    lookup = result["WEAT/oov/lookup"]
    insects = lookup["targets"][1]
    assert insects["missing"] == ["zzqxw_oov1", "zzqxw_oov2"] and len(insects["found"]) == 5
    for metric in ("WEAT", "RNSB", "MAC"):
        value = result[f"WEAT/oov/{metric}"]
        assert isinstance(value, Result) and math.isnan(value.agg_value)
        assert value.reason == lookup["reason"] and "Insects+OOV" in value.reason and "2 of 7" in value.reason
    p_value = next(result.loaded[k] for k, v in result.graph.vertices.items() if v.metric.name == "wefe_weat_p_value")
    assert math.isnan(p_value.agg_value) and p_value.reason == lookup["reason"] and not p_value.extra


# -- the benchmark and its command line -----------------------------------------------------
def test_load_queries_default_file_and_errors(tmp_path):
    assert list(spec.load_queries()) == list(spec.STANDARD_QUERIES)
    bad = tmp_path / "q.json"
    bad.write_text(json.dumps({"mine": {"target_sets": [["a"], []], "attribute_sets": [["b"]]}}))
    with pytest.raises(ValueError, match=r"q\.json: query 'mine'.*target set 1 is empty"):
        spec.load_queries(bad)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        spec.load_queries(tmp_path / "nope.json")


def test_cli_end_to_end_then_warm_rerun(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    argv = ["run", "weat", "--embeddings", str(NPZ), "--out", str(out), "--cache-dir", str(cache), "--quiet"]
    assert cli.main(argv) == 0
    evals = json.loads((out / "WEAT_EVAL.json").read_text())
    assert list(evals) == list(spec.STANDARD_QUERIES)
    weat1 = evals["weat1_flowers_insects"]
    assert list(weat1) == ["WEAT", "RNSB", "MAC"]  # the metrics whose template takes (2, 2)
    ref = next(c["output"] for c in PUBLIC if c["metric"] == "WEAT" and c["args"] == {} and c["query_id"] == "weat1_flowers_insects")
    w = weat1["WEAT"]
    assert {"query_name", "result", "weat", "effect_size", "p_value", "agg_value", "s_by_word"} <= set(w)
    assert abs(w["weat"] - ref["weat"]) < 1e-6 and abs(w["effect_size"] - ref["effect_size"]) < 1e-6
    assert w["agg_value"] == w["result"] == w["weat"] and w["p_value_method"] == "monte_carlo"
    assert list(w["s_by_word"]["Flowers"])[:3] == ["aster", "clover", "hyacinth"]  # the query's order
    mac = weat1["MAC"]
    assert {"mac", "targets_eval"} <= set(mac) and list(mac["targets_eval"]) == ["Flowers", "Insects"]
    lookup = json.loads((out / "WEAT_LOOKUP.json").read_text())
    assert lookup["weat1_flowers_insects"]["reason"] is None
    assert lookup["weat1_flowers_insects"]["targets"][0]["missing"] == []
    first = json.loads((out / "run.json").read_text())["nodes"]
    assert all(n["status"] == "computed" for n in first.values())
    cold = (out / "WEAT_EVAL.json").read_text()

    assert cli.main(argv) == 0
    warm = json.loads((out / "run.json").read_text())
    assert all(n["status"] == "cached" for n in warm["nodes"].values()) and len(warm["nodes"]) == len(first)
    assert (out / "WEAT_EVAL.json").read_text() == cold  # same numbers, same (WEFE's) key order


def test_cli_refuses_a_metric_that_cannot_take_the_queries(tmp_path, capsys):
    argv = ["run", "weat", "--embeddings", str(NPZ), "--metrics", "WEAT,RND",
            "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "'WEAT/weat1_flowers_insects/RND'" in err and "(2, 1)" in err and "(2, 2)" in err
    assert not (tmp_path / "c").exists()  # nothing ran, nothing was cached


def test_cli_queries_file_metrics_and_nan(tmp_path):
    queries = tmp_path / "mine.json"
    queries.write_text(json.dumps({
        "names_career": {"target_sets": {"Male": WORD_SETS["weat6_names_career_family"]["target_sets"][0],
                                         "Female": WORD_SETS["weat6_names_career_family"]["target_sets"][1]},
                         "attribute_sets": {"Career": WORD_SETS["weat6_names_career_family"]["attribute_sets"][0]}},
        "oov": WORD_SETS["oov_over_threshold"] | {"attribute_sets": WORD_SETS["oov_over_threshold"]["attribute_sets"][:1],
                                                   "attribute_sets_names": ["Pleasant"], "template": [2, 1],
                                                   "query_name": "x"},
    }))
    out = tmp_path / "o"
    argv = ["run", "weat", "--embeddings", str(NPZ), "--queries", str(queries), "--metrics", "rnd,ECT,RIPA",
            "--rnd-distance", "cos", "--out", str(out), "--cache-dir", str(tmp_path / "c"), "--quiet"]
    assert cli.main(argv) == 0
    evals = json.loads((out / "WEAT_EVAL.json").read_text())
    assert list(evals["names_career"]) == ["RND", "ECT", "RIPA"]
    by_word = evals["names_career"]["RND"]["distance_by_word"]
    assert list(by_word.values()) == sorted(by_word.values())  # WEFE's ascending order
    assert evals["oov"]["RND"]["result"] is None and evals["oov"]["RND"]["reason"]  # NaN: null, with why
    assert "Insects+OOV" in evals["oov"]["RND"]["reason"]


# -- a model's input embeddings ---------------------------------------------------------------
def test_hf_input_embeddings_are_token_rows_averaged(tmp_path):
    one_thread()
    tok = tokenizer()
    model = resource("llama")
    q = {"target_sets": {"Authors": ["Dara", "Ilves", "Tomas"], "Jobs": ["baker", "nurse", "author"]},
         "attribute_sets": {"Places": ["Cusco", "city", "born"], "Books": ["fiction", "historical", "genre"]}}
    # Tokenize before the first run: a fast tokenizer's call resets its truncation state,
    # which the engine's tokenizer fingerprint includes (reported to the lead). The
    # tokenizer is shared with other tests that tokenize with truncation.
    words = [w for s in list(q["target_sets"].values()) + list(q["attribute_sets"].values()) for w in s]
    ids = {w: tok(w, add_special_tokens=False)["input_ids"] for w in words}
    graph_nodes = query_nodes("tiny", q, ["WEAT", "MAC"], source=HFSource())
    result = run(graph_nodes, {"model": model}, cache_dir=tmp_path)
    assert result.ok, [f.error for f in result.failures()]
    table = model.load().model.get_input_embeddings().weight.detach().float().numpy()
    assert any(len(i) > 1 for i in ids.values())  # multi-token words are exercised
    checked = 0
    for key, v in result.graph.vertices.items():
        if v.metric.name != "wefe_word_set_hf":
            continue
        value = result.loaded[key]
        for word, vector in zip(value["found"], value["vectors"], strict=True):
            np.testing.assert_allclose(vector, table[ids[word]].mean(axis=0), rtol=0, atol=1e-6)
            assert value["tokens"][word] == tok.convert_ids_to_tokens(ids[word])
            checked += 1
    assert checked == len(words)
    assert result.executor["unique"] == len({t for i in ids.values() for t in i})  # one request per token
    assert math.isfinite(result["WEAT/tiny/WEAT"].agg_value)
    again = run(graph_nodes, {"model": resource("llama")}, cache_dir=tmp_path)
    assert again.count("computed") == 0 and not again.executor["model_loaded"]


# -- resources ----------------------------------------------------------------------------------
def test_embeddings_file_fingerprint_is_its_content(vectors, tmp_path):
    from evaldag.metrics.fairness.embeddings import save_npz

    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    save_npz(vectors, a)
    save_npz(vectors, b)
    assert WordVectorsResource(a).fingerprint() == WordVectorsResource(b).fingerprint()  # same bytes
    changed = np.array(vectors.matrix)
    changed[0, 0] += 1e-3
    save_npz(WordVectors(vectors.words, changed), b)
    assert WordVectorsResource(a).fingerprint() != WordVectorsResource(b).fingerprint()
    assert WordVectorsResource(vectors).fingerprint() == vectors.fingerprint()  # objects: by content
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        WordVectorsResource(tmp_path / "missing.npz")


def test_two_embeddings_side_by_side_in_one_graph(vectors, tmp_path):
    """source= names the resource, so one graph can compare two sets of vectors."""
    shifted = WordVectors(vectors.words, np.array(vectors.matrix) + np.float32(0.05))
    q = WORD_SETS["weat9_mental_physical"]
    graph_nodes = query_nodes("w9", q, ["WEAT"], group="A") + query_nodes("w9", q, ["WEAT"], source="other", group="B")
    result = run(graph_nodes, {"embeddings": WordVectorsResource(vectors), "other": WordVectorsResource(shifted)},
                 cache_dir=tmp_path)
    a, b = result["A/w9/WEAT"].agg_value, result["B/w9/WEAT"].agg_value
    assert a == pytest.approx(0.3385917798482946, abs=1e-6) and b != pytest.approx(a, abs=1e-4)
    assert {v.resources.get("embeddings") for v in result.graph.vertices.values()} == {None, "embeddings", "other"}
