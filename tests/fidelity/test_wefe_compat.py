"""The WEFE-compatible facade: WEFE 1.0.1's calls and result keys, computed through the graph."""

from __future__ import annotations

import json
import logging
import math
import types
from pathlib import Path

import numpy as np
import pytest
from evaldag.metrics.fairness import wefe_compat as wefe
from evaldag.metrics.fairness.embeddings import load_npz

from ..wefe_compare import FLOAT32_ATOL, RNSB_ATOL

FIX = Path(__file__).parents[1] / "fixtures" / "wefe"
NPZ = FIX / "wefe_subset.npz"
PUBLIC = json.loads((FIX / "wefe_reference_public.json").read_text())["results"]
EXTRA = json.loads((FIX / "wefe_reference_extra.json").read_text())
WORD_SETS = json.loads((FIX / "wefe_word_sets.json").read_text())
WEFE_KEYS = {
    "WEAT": ["query_name", "result", "weat", "effect_size", "p_value"],
    "RND": ["query_name", "result", "rnd", "distance_by_word"],
    "RNSB": ["query_name", "result", "rnsb", "negative_sentiment_probabilities", "negative_sentiment_distribution"],
    "MAC": ["query_name", "result", "mac", "targets_eval"],
    "ECT": ["query_name", "result", "ect"],
    "RIPA": ["query_name", "result", "ripa", "word_values"],
}


def query(qid: str, sets: dict = WORD_SETS) -> wefe.Query:
    d = sets[qid]
    return wefe.Query(d["target_sets"], d["attribute_sets"], d["target_sets_names"], d["attribute_sets_names"])


def wefe_args(case: dict) -> dict:
    """The case's WEFE arguments, plus the seed the reference run used (an evaldag addition)."""
    args = dict(case["args"])
    if "preprocessors" in args:  # "str.lower" in the JSON stands for the callable
        args["preprocessors"] = [{k: getattr(str, v[4:]) if k == "preprocessor" else v for k, v in p.items()}
                                 for p in args["preprocessors"]]
    seed = case.get("numpy_default_rng_patched_seed", case.get("numpy_global_seed"))
    if seed is not None:
        args["random_state"] = seed
    return args


def close(ours, ref, tol: float, path: str = "") -> None:
    """Every number of ref within tol; WEFE's keys in WEFE's order at every level."""
    if isinstance(ref, dict):
        assert [k for k in ours if k in ref] == list(ref), f"{path}: keys {list(ours)} vs WEFE's {list(ref)}"
        for k in ref:
            close(ours[k], ref[k], tol, f"{path}/{k}")
    elif ref is None:
        assert math.isnan(ours), path
    elif isinstance(ref, str):
        assert ours == ref, path
    else:
        assert abs(ours - ref) <= tol, (path, ours, ref)


@pytest.fixture(scope="module")
def model() -> wefe.WordEmbeddingModel:
    return wefe.WordEmbeddingModel(str(NPZ), "wefe subset")


METRIC_CLASSES = {"WEAT": wefe.WEAT, "RND": wefe.RND, "RNSB": wefe.RNSB, "MAC": wefe.MAC, "ECT": wefe.ECT, "RIPA": wefe.RIPA}


@pytest.mark.parametrize("case", [c for c in PUBLIC if "output" in c],
                         ids=lambda c: f"{c['query_id']}-{c['metric']}-{json.dumps(c['args'])}")
def test_public_reference(model, case, tmp_path):
    metric = METRIC_CLASSES[case["metric"]](cache_dir=tmp_path)
    out = metric.run_query(query(case["query_id"]), model, **wefe_args(case))
    assert list(out)[: len(WEFE_KEYS[case["metric"]])] == WEFE_KEYS[case["metric"]]
    close(out, case["output"], RNSB_ATOL if case["metric"] == "RNSB" else FLOAT32_ATOL)
    assert metric.last_run.count("computed") > 0
    again = metric.run_query(query(case["query_id"]), model, **wefe_args(case))
    assert metric.last_run.count("computed") == 0  # the second identical call: all from the cache
    assert json.dumps(again) == json.dumps(out)  # same values, same key order


@pytest.mark.parametrize("case", EXTRA["cases"][::7], ids=lambda c: f"{c['query_id']}-{c['metric']}-{json.dumps(c['args'])}")
def test_extra_reference_sample(case, tmp_path):
    vectors = load_npz(NPZ)
    words = dict(zip(vectors.words, vectors.matrix, strict=True))
    words.update({w: np.asarray(v, np.float32) for w, v in EXTRA["extra_vectors"].items()})
    model = wefe.WordEmbeddingModel(words)  # a dict word -> vector, as the facade allows
    metric = METRIC_CLASSES[case["metric"]](cache_dir=tmp_path)
    if "error" in case:
        with pytest.raises(IndexError, match="pairing='query'"):  # WEFE's IndexError, with a message
            metric.run_query(query(case["query_id"], EXTRA["queries"]), model, **wefe_args(case))
        return
    out = metric.run_query(query(case["query_id"], EXTRA["queries"]), model, **wefe_args(case))
    close(out, case["output"], RNSB_ATOL if case["metric"] == "RNSB" else FLOAT32_ATOL)


def test_nan_result_has_reason_and_p_value(model, tmp_path):
    out = wefe.WEAT(cache_dir=tmp_path).run_query(query("oov_over_threshold"), model, calculate_p_value=True)
    assert math.isnan(out["result"]) and math.isnan(out["p_value"])  # WEFE's NaN dict lacks p_value
    assert "Insects+OOV" in out["reason"] and "zzqxw_oov1" in out["reason"]


def test_template_mismatch_raises_valueerror_before_running(model, tmp_path):
    metric = wefe.RND(cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"'WEFE/query/RND'.*\(2, 1\).*\(2, 2\)"):
        metric.run_query(query("weat1_flowers_insects"), model)
    assert metric.last_run is None and not any(tmp_path.iterdir())  # nothing ran, nothing cached


def test_inputs_are_type_checked_like_wefe(model, tmp_path):
    with pytest.raises(TypeError, match="Query"):
        wefe.WEAT(cache_dir=tmp_path).run_query({"target_sets": []}, model)
    with pytest.raises(TypeError, match="WordEmbeddingModel"):
        wefe.WEAT(cache_dir=tmp_path).run_query(query("weat9_mental_physical"), {"a": [1.0]})
    with pytest.raises(TypeError, match="warn_not_found_words"):
        wefe.WEAT(cache_dir=tmp_path).run_query(query("weat9_mental_physical"), model, warn_not_found_words=1)
    with pytest.raises(ValueError, match="lowecase"):  # WEFE silently ignores the typo
        wefe.MAC(cache_dir=tmp_path).run_query(query("weat9_mental_physical"), model, preprocessors=[{"lowecase": True}])


def test_unknown_kwargs_are_ignored_with_a_warning(model, tmp_path):
    with pytest.warns(UserWarning, match="return_effect_sise"):
        out = wefe.MAC(cache_dir=tmp_path).run_query(query("weat9_mental_physical"), model, return_effect_sise=True)
    assert out["mac"] == out["result"]


def test_rnsb_refuses_other_estimators_and_options(model, tmp_path):
    rnsb = wefe.RNSB(cache_dir=tmp_path)
    q = query("weat9_mental_physical")
    with pytest.raises(NotImplementedError, match="estimator"):
        rnsb.run_query(q, model, estimator=types.SimpleNamespace(__name__="SVC"))
    with pytest.raises(NotImplementedError, match="'C': 10"):
        rnsb.run_query(q, model, estimator_params={"solver": "liblinear", "C": 10})
    ok = rnsb.run_query(q, model, estimator_params={"solver": "liblinear", "max_iter": 10000}, random_state=3)
    assert ok["random_state"] == 3


def test_unseeded_calls_draw_a_recorded_seed_and_are_not_cached(model, tmp_path):
    q = query("weat1_flowers_insects")
    weat = wefe.WEAT(cache_dir=tmp_path)
    a = weat.run_query(q, model, calculate_p_value=True, p_value_iterations=50)
    b = weat.run_query(q, model, calculate_p_value=True, p_value_iterations=50)
    assert a["p_value_random_state"] != b["p_value_random_state"]
    assert weat.last_run.count("computed") == 2  # the p-value and WEAT nodes; cosines came from the cache
    c = weat.run_query(q, model, calculate_p_value=True, p_value_iterations=50, random_state=a["p_value_random_state"])
    assert c["p_value"] == a["p_value"] and weat.last_run.count("computed") == 0
    exact = weat.run_query(query("weat9_mental_physical"), model, calculate_p_value=True, p_value_method="exact")
    assert exact["p_value"] == pytest.approx(6 / 924, abs=1e-15) and exact["p_value_random_state"] is None
    r1 = wefe.RNSB(cache_dir=tmp_path).run_query(q, model)
    r2 = wefe.RNSB(cache_dir=tmp_path).run_query(q, model)
    assert r1["result"] != r2["result"]  # unseeded: numpy's global stream goes on, as in WEFE


def test_unseeded_rnsb_draws_from_numpy_global_rng_like_wefe(model, tmp_path):
    """WEFE 1.0.1 after np.random.seed(0), RNSB with n_iterations=10 and no random_state."""
    cases = [c for c in EXTRA["cases"] if c["metric"] == "RNSB" and "numpy_global_seed" in c and "random_state" not in c["args"]]
    assert {c["query_id"] for c in cases} >= {"weat1_flowers_insects"}
    sets = {**WORD_SETS, **EXTRA["queries"]}
    for case in cases:
        np.random.seed(case["numpy_global_seed"])
        out = wefe.RNSB(cache_dir=tmp_path).run_query(query(case["query_id"], sets), model, **case["args"])
        assert out["result"] == pytest.approx(case["output"]["result"], rel=1e-9, abs=1e-12), case["query_id"]
        for w, p in case["output"]["negative_sentiment_probabilities"].items():
            assert out["negative_sentiment_probabilities"][w] == pytest.approx(p, rel=1e-7, abs=1e-9)
    np.random.seed(0)
    first = wefe.RNSB(cache_dir=tmp_path).run_query(query("weat1_flowers_insects"), model, n_iterations=10)
    assert first["result"] == pytest.approx(0.1013055299359478, rel=1e-9)  # the 0.1013, not 0.1057


def test_warn_not_found_words_logs_like_wefe(model, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=wefe.__name__):
        wefe.MAC(cache_dir=tmp_path).run_query(query("oov_under_threshold"), model, warn_not_found_words=True)
    assert "Insects+OOV" in caplog.text and "zzqxw_oov1" in caplog.text


def test_model_sources_agree_and_behave_like_wefe(tmp_path):
    vectors = load_npz(NPZ)
    keyed = types.SimpleNamespace(index_to_key=list(vectors.words), vectors=np.array(vectors.matrix))  # gensim's shape
    from_path = wefe.WordEmbeddingModel(str(NPZ), "npz")
    from_kv = wefe.WordEmbeddingModel(keyed, "kv", vocab_prefix=None)
    from_dict = wefe.WordEmbeddingModel(dict(zip(vectors.words, vectors.matrix, strict=True)))
    assert from_kv.wv is keyed and from_dict.name == "Unnamed model" and len(from_path) == 315
    assert "rose" in from_path and "zzqxw_oov1" not in from_path
    np.testing.assert_array_equal(from_kv["rose"], vectors["rose"])
    with pytest.raises(KeyError, match="not in model vocab"):
        from_path["zzqxw_oov1"]
    with pytest.raises(TypeError):
        wefe.WordEmbeddingModel(keyed, name=3)
    assert "315 word embeddings of 300 dims" in repr(from_path)
    results = [wefe.ECT(cache_dir=tmp_path).run_query(query("weat1_flowers_insects/A0", EXTRA["queries"]), m)["result"]
               for m in (from_path, from_kv, from_dict)]
    assert results[0] == results[1] == results[2]


def test_a_wefe_query_object_is_accepted(model, tmp_path):
    d = WORD_SETS["weat9_mental_physical"]
    foreign = types.SimpleNamespace(target_sets=d["target_sets"], attribute_sets=d["attribute_sets"],
                                    target_sets_names=d["target_sets_names"],
                                    attribute_sets_names=d["attribute_sets_names"])
    ours = wefe.WEAT(cache_dir=tmp_path).run_query(query("weat9_mental_physical"), model)
    theirs = wefe.WEAT(cache_dir=tmp_path).run_query(foreign, model)
    assert json.dumps(ours) == json.dumps(theirs)  # (NaN p-values: compare the text)


def test_vocab_prefix_is_applied(tmp_path):
    vectors = load_npz(NPZ)
    prefixed = wefe.WordEmbeddingModel({"/c/en/" + w: v for w, v in zip(vectors.words, vectors.matrix, strict=True)}, vocab_prefix="/c/en/")
    plain = wefe.WordEmbeddingModel(str(NPZ))
    q = query("weat9_mental_physical")
    a = wefe.MAC(cache_dir=tmp_path).run_query(q, prefixed)
    b = wefe.MAC(cache_dir=tmp_path).run_query(q, plain)
    assert a["result"] == b["result"] and list(a["targets_eval"]["Mental disease"])[0].startswith("/c/en/")
