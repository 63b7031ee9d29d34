"""WEFE metrics against WEFE 1.0.1's own numbers, plus the behaviour around them.

Fixtures (tests/fixtures/wefe/): ``wefe_subset.npz`` (the vectors of every WEAT word
in WEFE's test model), ``wefe_word_sets.json``, ``wefe_reference_public.json`` (the
shared reference: WEAT, RNSB, MAC on three queries) and ``wefe_reference_extra.json``
(made by ``make_wefe_extra.py`` with WEFE itself: RND, ECT, RIPA, WEFE's seeded
p-value sampler, RNSB seeds and iterations, preprocessors, NaN cases).
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import re
import string
from pathlib import Path

import numpy as np
import pytest
from evaldag.metrics.fairness import (
    Query,
    RipaPairingError,
    TemplateError,
    check_template,
    ect,
    lookup_query,
    mac,
    ripa,
    rnd,
    rnsb,
    weat,
)
from evaldag.metrics.fairness.embeddings import (
    EmbeddingFormatError,
    WordVectors,
    as_word_vectors,
    from_dict,
    load_embeddings,
    load_npz,
)
from evaldag.metrics.fairness.logistic import fit_logistic_exact, fit_logistic_tron
from evaldag.metrics.fairness.lookup import preprocess_word
from evaldag.metrics.fairness.weat import (
    s_vector,
    weat_p_value_exact,
    weat_p_value_wefe,
    weat_score,
)

from ..wefe_compare import FLOAT32_ATOL, LIBLINEAR_ATOL, RNSB_ATOL, worst_diff

FIX = Path(__file__).parents[1] / "fixtures" / "wefe"
METRICS = {"WEAT": weat, "RND": rnd, "RNSB": rnsb, "MAC": mac, "ECT": ect, "RIPA": ripa}
LOOKUP_ARGS = {"lost_vocabulary_threshold", "preprocessors", "strategy", "normalize"}
TOL = {"RNSB": RNSB_ATOL}  # the brief's bound for RNSB; float32 rounding (FLOAT32_ATOL) for every other metric
PUBLIC = json.loads((FIX / "wefe_reference_public.json").read_text())["results"]
EXTRA = json.loads((FIX / "wefe_reference_extra.json").read_text())
WORD_SETS = json.loads((FIX / "wefe_word_sets.json").read_text())


@pytest.fixture(scope="module")
def vectors() -> WordVectors:
    return load_npz(FIX / "wefe_subset.npz")


@pytest.fixture(scope="module")
def vectors_extra(vectors) -> WordVectors:
    """The subset plus the case/accent variants the extra fixture added to WEFE's model."""
    extra = EXTRA["extra_vectors"]
    return WordVectors(
        list(vectors.words) + list(extra),
        np.vstack([vectors.matrix, np.array(list(extra.values()), np.float32)]),
    )


def _run(vecs: WordVectors, query: Query, metric: str, args: dict, case: dict) -> dict:
    """Call our metric with a reference case's WEFE arguments (and its recorded seed)."""
    lookup_args = {k: v for k, v in args.items() if k in LOOKUP_ARGS}
    if "preprocessors" in lookup_args:  # "str.lower" in JSON means the callable str.lower
        lookup_args["preprocessors"] = [
            {k: (getattr(str, v[4:]) if k == "preprocessor" else v) for k, v in p.items()}
            for p in lookup_args["preprocessors"]
        ]
    metric_args = {k: v for k, v in args.items() if k not in LOOKUP_ARGS}
    if metric_args.get("calculate_p_value"):
        metric_args.update(
            p_value_method="wefe", random_state=case["numpy_default_rng_patched_seed"]
        )
    if "numpy_global_seed" in case:
        metric_args["random_state"] = case["numpy_global_seed"]
    return METRICS[metric](lookup_query(vecs, query, **lookup_args), **metric_args)


# -- the shared reference (WEFE 1.0.1) ----------------------------------------------------
@pytest.mark.parametrize(
    "case",
    [c for c in PUBLIC if "output" in c],
    ids=lambda c: f"{c['query_id']}-{c['metric']}-{json.dumps(c['args'])}",
)
def test_public_reference(vectors, case):
    query = Query.from_dict(WORD_SETS[case["query_id"]])
    ours = _run(vectors, query, case["metric"], case["args"], case)
    assert worst_diff(ours, case["output"], same_keys_order=True, none_ok=True) <= TOL.get(case["metric"], FLOAT32_ATOL)
    if case["args"].get("calculate_p_value"):  # WEFE's sampler replayed: the same p exactly
        assert ours["p_value"] == pytest.approx(case["output"]["p_value"], abs=1e-15)


@pytest.mark.parametrize(
    "case",
    [c for c in PUBLIC if "s_target_0" in c.get("independent_float64", {})],
    ids=lambda c: f"{c['query_id']}-{json.dumps(c['args'])}",
)
def test_s_vectors_match_independent_float64(vectors, case):
    lk = lookup_query(vectors, Query.from_dict(WORD_SETS[case["query_id"]]), **case["args"])
    (t1, t2), (a, b) = lk.targets, lk.attributes
    ref = case["independent_float64"]
    np.testing.assert_allclose(
        s_vector(t1.vectors, a.vectors, b.vectors), ref["s_target_0"], atol=1e-6
    )
    np.testing.assert_allclose(
        s_vector(t2.vectors, a.vectors, b.vectors), ref["s_target_1"], atol=1e-6
    )


def test_monte_carlo_p_value_matches_independent_reference(vectors):
    ref = next(c for c in PUBLIC if c["metric"] == "WEAT_pvalue_independent")
    lk = lookup_query(vectors, Query.from_dict(WORD_SETS[ref["query_id"]]))
    out = weat(
        lk,
        calculate_p_value=True,
        p_value_method="monte_carlo",
        p_value_iterations=ref["mc_iterations"],
        random_state=ref["mc_seed_numpy_default_rng"],
    )
    assert out["weat"] == pytest.approx(ref["observed_weat"], abs=1e-6)
    assert out["p_value"] == pytest.approx(ref["mc_true_permutation_p_right_sided"], abs=1e-15)
    assert out["p_value_method"] == "monte_carlo"


def test_rnsb_liblinear_replay_is_much_closer_than_required(vectors):
    """The TRON replay reproduces sklearn's early-stopped weights, not just the optimum."""
    worst = {"liblinear": 0.0, "exact": 0.0}
    for case in (c for c in PUBLIC if c["metric"] == "RNSB"):
        query = Query.from_dict(WORD_SETS[case["query_id"]])
        for solver in worst:
            ours = _run(vectors, query, "RNSB", dict(case["args"], solver=solver), case)
            worst[solver] = max(worst[solver], worst_diff(ours, case["output"], same_keys_order=True, none_ok=True))
    assert worst["liblinear"] < LIBLINEAR_ATOL
    assert 1e-7 < worst["exact"] < 1e-4  # the optimum itself is farther from sklearn


# -- more of WEFE's own outputs (make_wefe_extra.py) --------------------------------------
@pytest.mark.parametrize(
    "case", EXTRA["cases"], ids=lambda c: f"{c['query_id']}-{c['metric']}-{json.dumps(c['args'])}"
)
def test_extra_reference(vectors_extra, case):
    query = Query.from_dict(EXTRA["queries"][case["query_id"]])
    if "error" in case:  # WEFE raised (RIPA with a shorter T2 after OOV removal)
        assert case["error"]["type"] == "IndexError"
        with pytest.raises(RipaPairingError, match=re.escape(query.query_name)):
            _run(vectors_extra, query, case["metric"], case["args"], case)
        return
    ours = _run(vectors_extra, query, case["metric"], case["args"], case)
    assert worst_diff(ours, case["output"], same_keys_order=True, none_ok=True) <= TOL.get(case["metric"], FLOAT32_ATOL)
    if case["args"].get("calculate_p_value"):
        assert ours["p_value"] == pytest.approx(case["output"]["p_value"], abs=1e-15)
    if case["output"]["result"] is None:
        assert ours["reason"]


# -- lost vocabulary -------------------------------------------------------------------------
def test_lost_vocabulary_makes_every_metric_nan_with_a_reason(vectors):
    q = Query.from_dict(WORD_SETS["oov_over_threshold"])
    lk = lookup_query(vectors, q)
    assert not lk.ok
    assert "Insects+OOV" in lk.reason and "zzqxw_oov1" in lk.reason and "2 of 7" in lk.reason
    for fn in (weat, mac, rnsb):
        out = fn(lk)
        assert math.isnan(out["result"]) and out["reason"] == lk.reason
    assert math.isnan(weat(lk)["p_value"])  # present, unlike WEFE's NaN dict (issue #21)
    sub = Query(
        q.target_sets, q.attribute_sets[:1], q.target_sets_names, q.attribute_sets_names[:1]
    )
    for fn in (rnd, ect, ripa):
        assert math.isnan(fn(lookup_query(vectors, sub))["result"])


def test_lost_vocabulary_threshold_is_strictly_greater(vectors):
    q = Query.from_dict(WORD_SETS["oov_under_threshold"])  # Insects+OOV loses 1 of 7
    assert lookup_query(vectors, q, lost_vocabulary_threshold=1 / 7).ok
    assert not lookup_query(vectors, q, lost_vocabulary_threshold=0.14).ok
    assert lookup_query(vectors, q).targets[1].missing == ("zzqxw_oov1",)
    with pytest.raises(TypeError):
        lookup_query(vectors, q, lost_vocabulary_threshold="0.2")
    with pytest.raises(ValueError):
        lookup_query(vectors, q, lost_vocabulary_threshold=1.5)


def test_duplicates_collapse_keep_order_and_count_as_lost(vectors):
    q = Query([["rose", "tulip", "rose", "lily", "tulip"], ["ant", "flea"]], [["love"], ["hatred"]])
    t1 = lookup_query(vectors, q, lost_vocabulary_threshold=0.5).targets[0]
    assert t1.found == ("rose", "tulip", "lily")
    assert t1.positions == (0, 1, 0, 2, 1)
    assert t1.lost_fraction == pytest.approx(2 / 5)
    lk = lookup_query(vectors, q)
    assert not lk.ok and "duplicates collapse" in lk.reason


# -- preprocessors -----------------------------------------------------------------------------
def test_preprocess_word_priority_accents_callable_prefix():
    assert (
        preprocess_word("ÁsTer", {"lowercase": True, "uppercase": True, "titlecase": True})
        == "áster"
    )
    assert preprocess_word("áster", {"uppercase": True, "titlecase": True}) == "ÁSTER"
    assert preprocess_word("áster bloom", {"titlecase": True}) == "Áster Bloom"
    assert preprocess_word("Dáisy", {"strip_accents": True}) == "Daisy"
    assert preprocess_word("Straße", {"strip_accents": "unicode"}) == "Straße"  # ß is no accent
    assert preprocess_word("Straße", {"strip_accents": "ascii"}) == "Strae"  # ascii drops it
    assert preprocess_word("Rose", {"preprocessor": str.upper, "lowercase": True}) == "ROSE"
    assert preprocess_word("rose", {}, vocab_prefix="/c/en/") == "/c/en/rose"


def test_preprocessors_first_and_all(vectors_extra):
    q = Query([["ASTER", "Spider", "Dáisy"], ["ant"]], [["love"], ["hatred"]])
    first = lookup_query(
        vectors_extra, q, preprocessors=[{}, {"lowercase": True, "strip_accents": True}]
    )
    t = first.targets[0]
    assert t.found == ("aster", "Spider", "daisy")
    assert t.not_found == ("ASTER", "Dáisy")  # WEFE's list: every variant that missed
    assert t.missing == ()
    both = lookup_query(
        vectors_extra,
        q,
        strategy="all",
        preprocessors=[{}, {"lowercase": True, "strip_accents": True}],
    )
    assert both.targets[0].found == ("aster", "Spider", "spider", "daisy")
    assert both.targets[0].lost_fraction == pytest.approx(-1 / 3)  # WEFE's formula, negative


def test_bad_preprocessors_and_strategy_are_refused(vectors):
    q = Query([["rose"], ["ant"]], [["love"], ["hatred"]])
    with pytest.raises(ValueError, match="lowecase"):
        lookup_query(vectors, q, preprocessors=[{"lowecase": True}])
    with pytest.raises(ValueError, match="strip_accents"):
        lookup_query(vectors, q, preprocessors=[{"strip_accents": "latin"}])
    with pytest.raises(ValueError, match="strategy"):
        lookup_query(vectors, q, strategy="last")
    with pytest.raises(ValueError, match="at least one"):
        lookup_query(vectors, q, preprocessors=[])


def test_normalize_gives_unit_vectors(vectors):
    lk = lookup_query(
        vectors, Query.from_dict(WORD_SETS["weat6_names_career_family"]), normalize=True
    )
    for s in lk.targets + lk.attributes:
        np.testing.assert_allclose(np.linalg.norm(s.vectors, axis=1), 1.0, atol=1e-6)
        assert s.vectors.dtype == np.float32 and not s.vectors.flags.writeable


# -- templates ------------------------------------------------------------------------------------
def test_template_errors_name_metric_query_and_cardinalities(vectors):
    q3 = Query.from_dict(WORD_SETS["three_targets_pleasant"])
    lk3 = lookup_query(vectors, q3)
    with pytest.raises(TemplateError) as err:
        weat(lk3)
    msg = str(err.value)
    assert "WEAT" in msg and q3.query_name in msg and "(3, 2)" in msg and "(2, 2)" in msg
    for fn in (rnd, ect, ripa):  # (2, 1) metrics refuse two attribute sets
        with pytest.raises(TemplateError, match=fn.__name__.upper()):
            fn(lookup_query(vectors, Query.from_dict(WORD_SETS["weat1_flowers_insects"])))
    assert not math.isnan(mac(lk3)["result"])  # ('n', 'n')
    assert not math.isnan(rnsb(lk3, random_state=0)["result"])  # ('n', 2)
    with pytest.raises(TemplateError, match="one or more"):
        check_template("MAC", "q", (0, 2))
    with pytest.raises(TemplateError):
        check_template("RNSB", "q", (2, 3))
    with pytest.raises(ValueError, match="unknown"):
        check_template("XYZ", "q", (2, 2))


def test_query_validation():
    with pytest.raises(ValueError, match="duplicate"):
        Query([["a"], ["b"]], [["c"]], ["same", "same"], ["A"])
    with pytest.raises(ValueError, match="empty"):
        Query([["a"], []], [["c"]])
    with pytest.raises(TypeError):
        Query([["a", 3]], [["c"]])
    q = Query([["a"], ["b"], ["c"]], [["x"], ["y"]], ["T1", "T2", "T3"], ["A1", "A2"])
    assert q.query_name == "T1, T2 and T3 wrt A1 and A2"
    assert Query([["a"]], []).query_name == "Target set 0"


# -- RIPA pairing -------------------------------------------------------------------------------
def _ripa_by_hand(pairs, attrs):
    b = [(x - y) / np.linalg.norm(x - y) for x, y in pairs]
    return float(np.mean([np.mean([a @ bi for bi in b]) for a in attrs]))


def test_ripa_pairs_by_position_after_oov_removal():
    rng = np.random.default_rng(3)
    base = {
        w: rng.normal(size=5).astype(np.float32)
        for w in ["a1", "a2", "a3", "b1", "b2", "b3", "x", "y"]
    }
    v = {w: x.astype(np.float64) for w, x in base.items()}
    attrs = [v["x"], v["y"]]
    # T1 loses a2: WEFE pairs a1-b1 and a3-b2; pairing='query' keeps a1-b1 and a3-b3
    without_a2 = from_dict({w: x for w, x in base.items() if w != "a2"})
    q = Query([["a1", "a2", "a3"], ["b1", "b2", "b3"]], [["x", "y"]])
    lk = lookup_query(without_a2, q, lost_vocabulary_threshold=0.5)
    assert ripa(lk)["result"] == pytest.approx(
        _ripa_by_hand([(v["a1"], v["b1"]), (v["a3"], v["b2"])], attrs), abs=1e-6
    )
    assert ripa(lk, pairing="query")["result"] == pytest.approx(
        _ripa_by_hand([(v["a1"], v["b1"]), (v["a3"], v["b3"])], attrs), abs=1e-6
    )
    # T2 shorter than T1: WEFE's IndexError, here naming the query and the missing word
    q2 = Query([["a1", "a2", "a3"], ["b1", "zz", "b3"]], [["x", "y"]], ["As", "Bs"], ["XY"])
    lk2 = lookup_query(from_dict(base), q2, lost_vocabulary_threshold=0.5)
    with pytest.raises(RipaPairingError, match=r"As and Bs wrt XY.*zz"):
        ripa(lk2)
    assert isinstance(RipaPairingError("x"), IndexError)
    assert ripa(lk2, pairing="query")["result"] == pytest.approx(
        _ripa_by_hand([(v["a1"], v["b1"]), (v["a3"], v["b3"])], attrs), abs=1e-6
    )
    word_values = ripa(lk2, pairing="query")["word_values"]
    assert list(word_values) == ["x", "y"] and set(word_values["x"]) == {"mean", "std"}


# -- WEAT p-values ------------------------------------------------------------------------------
def _brute_force(s1, s2, test_type):
    pool = list(s1) + list(s2)
    obs = sum(s1) - sum(s2)
    mu = (len(s1) - len(s2)) * sum(pool) / len(pool)
    hits = total = 0
    for idx in itertools.combinations(range(len(pool)), len(s1)):
        x = sum(pool[i] for i in idx)
        stat = x - (sum(pool) - x)
        total += 1
        hits += {
            "right-sided": stat > obs + 1e-12,
            "left-sided": stat < obs - 1e-12,
            "two-sided": abs(stat - mu) > abs(obs - mu) + 1e-12,
        }[test_type]
    return hits / total


@pytest.mark.parametrize("test_type", ["right-sided", "left-sided", "two-sided"])
@pytest.mark.parametrize("sizes", [(4, 4), (3, 5), (5, 2)])
def test_exact_p_value_equals_brute_force(sizes, test_type):
    rng = np.random.default_rng(sum(sizes))
    s1, s2 = rng.normal(0.3, 1, sizes[0]), rng.normal(0, 1, sizes[1])
    assert weat_p_value_exact(s1, s2, test_type) == pytest.approx(
        _brute_force(s1, s2, test_type), abs=1e-15
    )


def test_exact_p_value_is_strict_so_ties_do_not_count():
    s1, s2 = np.array([1.0, 1.0, 0.5]), np.array([0.5, 0.0, 0.0])
    # 20 splits; stats above the observed 2.0: none (the observed split is the maximum,
    # and the split swapping the two 1.0s -- or the two 0.5s -- ties it)
    assert weat_p_value_exact(s1, s2) == 0.0
    assert weat_p_value_exact(s2, s1, "left-sided") == 0.0


def test_weat9_exact_p_value_is_the_recorded_one(vectors):
    """Caliskan et al.'s exact test on WEAT 9: 6 of C(12, 6) = 924 splits exceed it."""
    lk = lookup_query(vectors, Query.from_dict(WORD_SETS["weat9_mental_physical"]))
    out = weat(lk, calculate_p_value=True)
    assert out["p_value_method"] == "exact"
    assert out["p_value"] == pytest.approx(6 / 924, abs=1e-15)  # the research notes' 0.0065
    assert round(out["p_value"], 4) == 0.0065
    (t1, t2), (a, b) = lk.targets, lk.attributes
    s1, s2 = (s_vector(t.vectors, a.vectors, b.vectors) for t in (t1, t2))
    assert out["p_value"] == pytest.approx(_brute_force(s1, s2, "right-sided"), abs=1e-15)


def test_auto_switches_to_monte_carlo_and_mc_is_seeded(vectors):
    lk = lookup_query(vectors, Query.from_dict(WORD_SETS["docs_gender_family_career"]))
    exact = weat(lk, calculate_p_value=True)["p_value"]
    mc = weat(
        lk, calculate_p_value=True, max_exact_splits=100, random_state=5, p_value_iterations=20000
    )
    assert mc["p_value_method"] == "monte_carlo"
    assert (
        mc["p_value"]
        == weat(
            lk,
            calculate_p_value=True,
            p_value_method="monte_carlo",
            random_state=5,
            p_value_iterations=20000,
        )["p_value"]
    )
    assert abs(mc["p_value"] - exact) < 0.01  # binomial sd at p=0.2, n=20000: 0.0028
    with pytest.raises(ValueError, match="max_exact_splits"):
        weat(lk, calculate_p_value=True, p_value_method="exact", max_exact_splits=100)


def test_wefe_sampler_draws_with_replacement_and_caps_runs_at_n_factorial():
    words1, words2 = ["a", "b"], ["c", "d"]
    s1, s2 = np.array([0.3, 0.1]), np.array([-0.2, 0.05])
    obs = weat_score(s1, s2)
    p = weat_p_value_wefe(words1, s1, words2, s2, obs, iterations=1000, random_state=0)
    # runs = min(1000, 4!) = 24 distinct draws out of 4**4 = 256 sequences (with replacement)
    assert (p * 25) == pytest.approx(round(p * 25))
    rng = np.random.default_rng(0)
    seen, count = set(), 0
    pool = np.array([0.3, 0.1, -0.2, 0.05])
    while len(seen) < 24:
        draw = tuple(rng.choice(4, size=4).tolist())
        if draw not in seen:
            seen.add(draw)
            count += pool[list(draw[:2])].sum() - pool[list(draw[2:])].sum() > obs
    assert p == (count + 1) / 25
    assert any(len(set(d)) < 4 for d in seen)  # some draws repeat a word


# -- RNSB ----------------------------------------------------------------------------------------
def test_logistic_solvers_agree_with_an_independent_optimiser():
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6)).astype(np.float32)
    y = np.where(x[:, 0] + 0.5 * rng.normal(size=40) > 0, 1.0, -1.0)
    xt = np.hstack([x.astype(np.float64), np.ones((40, 1))])

    def f(w):
        return 0.5 * w @ w + np.sum(np.logaddexp(0, -y * (xt @ w)))

    ref = minimize(f, np.zeros(7), method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15}).x
    coef, b = fit_logistic_exact(x, y)
    np.testing.assert_allclose(np.append(coef, b), ref, atol=1e-6)
    assert abs(b) > 1e-3  # the intercept is in the regularised problem, not free
    coef_t, b_t = fit_logistic_tron(x, y)
    np.testing.assert_allclose(np.append(coef_t, b_t), ref, atol=1e-3)  # liblinear stops early


def test_rnsb_seeds_iterations_and_dropped_iterations(vectors):
    lk = lookup_query(vectors, Query.from_dict(WORD_SETS["weat7_math_arts_gender"]))
    a, b = rnsb(lk, random_state=3, n_iterations=4), rnsb(lk, random_state=3, n_iterations=4)
    assert a["result"] == b["result"] and len(a["classifier_accuracy"]) == 4
    assert rnsb(lk, random_state=4, n_iterations=4)["result"] != a["result"]
    tiny = Query([["rose", "tulip"], ["ant", "flea"]], [["love", "peace"], ["hatred", "evil"]])
    out = rnsb(lookup_query(vectors, tiny), random_state=0)  # 4 words: the holdout split fails
    assert math.isnan(out["result"]) and "dropped" in out["reason"]
    assert out["dropped_iterations"] and out["negative_sentiment_probabilities"] == {}
    assert not math.isnan(
        rnsb(lookup_query(vectors, tiny), holdout=False, random_state=0)["result"]
    )


# -- embeddings -----------------------------------------------------------------------------------
def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_load_text_with_and_without_header_and_gz(tmp_path):
    body = "king 0.5 1.0 -2\nqueen 0.25 0 3e-1\nnew york 1 2 3\n"
    for name, text in (("w2v.txt", "3 3\n" + body), ("glove.txt", body)):
        wv = load_embeddings(_write(tmp_path / name, text))
        assert wv.words == ("king", "queen", "new york") and wv.dim == 3
        np.testing.assert_array_equal(wv["queen"], np.array([0.25, 0, 0.3], np.float32))
    gz = tmp_path / "v.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(body)
    assert (
        load_embeddings(gz).fingerprint() == load_embeddings(tmp_path / "glove.txt").fingerprint()
    )


@pytest.mark.parametrize(
    "text, where, what",
    [
        ("2 3\nking 1 2 3\nqueen 1 2\n", ":3:", "expected a word and 3 numbers"),
        ("king 1 2 3\nqueen 1 two 3\n", ":2:", "'two' is not a number"),
        ("3 3\nking 1 2 3\nqueen 1 2 3\n", ":1:", "declares 3 vectors"),
        ("king 1 2 3\n\nqueen 1 2 3\n", ":2:", "blank line"),
    ],
)
def test_malformed_text_names_file_and_line(tmp_path, text, where, what):
    path = _write(tmp_path / "bad.txt", text)
    with pytest.raises(EmbeddingFormatError) as err:
        load_embeddings(path)
    assert str(path) + where in str(err.value) and what in str(err.value)


def test_load_binary_roundtrip_and_truncation(tmp_path):
    words = ["alpha", "béta", "gamma"]
    mat = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    blob = b"3 4\n" + b"".join(
        w.encode() + b" " + row.astype("<f4").tobytes() + b"\n"
        for w, row in zip(words, mat, strict=True)
    )
    (tmp_path / "v.bin").write_bytes(blob)
    wv = load_embeddings(tmp_path / "v.bin")
    assert wv.words == tuple(words)
    np.testing.assert_array_equal(wv.matrix, mat)
    (tmp_path / "cut.bin").write_bytes(blob[:-10])
    with pytest.raises(EmbeddingFormatError, match=r"cut\.bin: entry 3 'gamma'.*truncated"):
        load_embeddings(tmp_path / "cut.bin")


def test_npz_dict_and_keyed_vectors_sources(tmp_path, vectors):
    class FakeKeyedVectors:  # gensim's attributes, without gensim
        pass

    kv = FakeKeyedVectors()
    kv.index_to_key, kv.vectors = list(vectors.words), np.array(vectors.matrix)
    assert as_word_vectors(kv).fingerprint() == vectors.fingerprint()

    class Wrapper:  # WEFE's WordEmbeddingModel / gensim's Word2Vec hold it in .wv
        wv = kv

    assert as_word_vectors(Wrapper()).fingerprint() == vectors.fingerprint()
    d = {w: vectors[w] for w in vectors.words}
    assert as_word_vectors(d).fingerprint() == vectors.fingerprint()
    np.savez(tmp_path / "bad.npz", words=np.array(["a"]), vecs=np.zeros((1, 2)))
    with pytest.raises(EmbeddingFormatError, match=r"bad\.npz.*'vectors'"):
        load_npz(tmp_path / "bad.npz")
    with pytest.raises(EmbeddingFormatError, match="has 2 values, expected 3"):
        from_dict({"a": [1, 2, 3], "b": [1, 2]})
    with pytest.raises(EmbeddingFormatError, match="NaN"):
        WordVectors(["a"], [[np.nan, 1.0]])


def test_fingerprint_is_strict(vectors):
    base = vectors.fingerprint()
    assert WordVectors(vectors.words, vectors.matrix).fingerprint() == base
    bumped = vectors.matrix.copy()
    bumped[7, 11] = np.nextafter(bumped[7, 11], np.float32(np.inf))
    assert WordVectors(vectors.words, bumped).fingerprint() != base
    renamed = list(vectors.words)
    renamed[0] = renamed[0] + "_"
    assert WordVectors(renamed, vectors.matrix).fingerprint() != base
    order = np.arange(len(vectors))[::-1]
    assert (
        WordVectors([vectors.words[i] for i in order], vectors.matrix[order]).fingerprint() != base
    )
    assert len(base) == 64 and set(base) <= set(string.hexdigits)
    with pytest.raises(ValueError):
        vectors.matrix[0, 0] = 1.0  # read-only: the fingerprint cannot go stale


def test_duplicate_words_keep_the_first_vector():
    with pytest.warns(UserWarning, match=r"1 duplicate word\(s\) \('a'\); the first vector of each is kept"):
        wv = WordVectors(["a", "b", "a"], [[1.0, 0], [0, 1.0], [5.0, 5.0]])
    assert wv.words == ("a", "b") and wv.duplicates == 1
    np.testing.assert_array_equal(wv["a"], [1.0, 0.0])
