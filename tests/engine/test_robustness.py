"""R, Q and HM against hand values and edge cases, and both variants against the
unlearning-depth-score project's own formulas on the same numbers (transcribed below)."""

from __future__ import annotations

import json

import math

import numpy as np
import pytest

from evaldag.engine.knowledge import as_is, signed
from evaldag.engine.robustness import (
    FORMULAS, FormulaError, formula, harmonic, quant_openunlearning, quant_symmetric, refusal,
    relearn_openunlearning, relearn_symmetric,
)


# ------------------------------------------------------------------ the reference, transcribed
# github.com/gnueaj/unlearning-depth-score, scripts/meta_eval_robustness.py (commit 02de437):
# its variables m_unl_a / m_ret_a hold the values *before* the attack and m_unl_b / m_ret_b
# the values after (``m_unl_a = scores_before``, ``m_unl_b = cached_after_relearn``).


def uds_R(m_unl_a, m_unl_b, m_ret_a, m_ret_b, denom_zero_mode="none"):
    denom = m_unl_a - m_unl_b
    numer = m_ret_a - m_ret_b
    if abs(denom) < 1e-8:
        return 1.0 if denom_zero_mode == "one" else None
    return max(0.0, min(numer / denom, 1.0))


def uds_Q(m_unl_a, m_unl_b):
    if abs(m_unl_a) < 1e-8:
        return 1.0
    return max(0.0, min(m_unl_b / m_unl_a, 1.0))


def uds_robustness(avg_R, avg_Q):
    if avg_R is not None and avg_Q is not None and avg_R > 0 and avg_Q > 0:
        return 2 * avg_R * avg_Q / (avg_R + avg_Q)
    return None


# docs/data/meta_eval.json "formulas" (the symmetric variant; the project publishes no eps)
def uds_sym_R(d_unl, d_ret, eps=1e-8):
    return 1 - min(max(abs(d_unl - d_ret) / (abs(d_unl) + abs(d_ret) + eps), 0), 1)


def uds_sym_Q(before, after, eps=1e-8):
    return 1 - min(max(abs(after - before) / (abs(before) + abs(after) + eps), 0), 1)


# ------------------------------------------------------------------ hand values


def test_relearning_R_hand_values_and_edges():
    # unlearned 0.1 -> 0.5 (D_unl 0.4), retain 0.2 -> 0.3 (D_ret 0.1): 0.1 / 0.4
    assert relearn_openunlearning(0.1, 0.5, 0.2, 0.3).value == pytest.approx(0.25, abs=1e-15)
    # the retain model gains more than the unlearned one: 3.0, clipped to 1
    s = relearn_openunlearning(0.1, 0.2, 0.2, 0.5)
    assert s.value == 1.0 and s.raw == pytest.approx(3.0)
    # wrong sign: the attack lowers the unlearned model's knowledge while the retain model gains: -0.5 -> 0
    s = relearn_openunlearning(0.5, 0.3, 0.2, 0.3)
    assert s.value == 0.0 and s.raw == pytest.approx(-0.5)
    # both lose: a positive ratio, kept
    assert relearn_openunlearning(0.5, 0.3, 0.4, 0.3).value == pytest.approx(0.5)
    # no change / zero denominator: undefined, not a number
    s = relearn_openunlearning(0.4, 0.4, 0.2, 0.3)
    assert s.value is None and s.reason.startswith("undefined: |D_unl| = 0 is below the minimum 1e-08")
    # a change under the stated minimum is undefined too
    assert relearn_openunlearning(0.4, 0.41, 0.2, 0.3, min_delta=0.05).value is None
    # inside the item-level noise: undefined, saying why
    s = relearn_openunlearning(0.1, 0.5, 0.2, 0.3, noise="95% interval [-0.02, +0.8] holds 0")
    assert s.value is None and "inside the item-level noise" in s.reason and "+0.4" in s.reason
    assert relearn_openunlearning(0.1, None, 0.2, 0.3).value is None


def test_quantization_Q_hand_values_and_edges():
    assert quant_openunlearning(0.2, 0.8).value == pytest.approx(0.25)  # knowledge came back: 0.2 / 0.8
    s = quant_openunlearning(0.8, 0.2)  # quantization removed some: 4.0 clipped to 1
    assert s.value == 1.0 and s.raw == pytest.approx(4.0)
    assert quant_openunlearning(0.3, 0.3).value == 1.0  # no change
    assert quant_openunlearning(0.3, 0.0).value == 1.0  # zero denominator: nothing came back
    # ... and it is written as JSON (ROBUSTNESS.json refuses NaN/Infinity): the unclipped ratio as text
    assert json.loads(json.dumps(quant_openunlearning(0.3, 0.0).as_dict(), allow_nan=False)) == {"value": 1.0, "raw": "+inf"}
    assert quant_openunlearning(0.0, 0.0).value == 1.0
    assert quant_openunlearning(0.0, 0.5).value == 0.0  # from nothing to something
    s = quant_openunlearning(-0.1, 0.5)
    assert s.value is None and "negative knowledge value" in s.reason


def test_harmonic_mean():
    assert harmonic(0.25, 0.25).value == pytest.approx(0.25)
    assert harmonic(0.5, 1.0).value == pytest.approx(2 / 3)
    assert harmonic(0.0, 0.7).value == 0.0
    s = harmonic(relearn_openunlearning(0.4, 0.4, 0.2, 0.3), 1.0)
    assert s.value is None and s.reason.startswith("R is undefined (undefined: |D_unl|")


def test_symmetric_hand_values_and_edges():
    assert relearn_symmetric(0.1, 0.5, 0.2, 0.3).value == pytest.approx(1 - 0.3 / 0.5, abs=1e-7)
    assert relearn_symmetric(0.4, 0.4, 0.2, 0.2).value == 1.0  # no change at all
    assert relearn_symmetric(0.4, 0.4, 0.2, 0.3).value == pytest.approx(0.0, abs=1e-7)  # only the retain model moved
    assert quant_symmetric(0.2, 0.8).value == pytest.approx(0.4, abs=1e-7)
    assert quant_symmetric(0.8, 0.2).value == pytest.approx(0.4, abs=1e-7)  # either direction penalised alike
    assert quant_symmetric(0.0, 0.0).value == 1.0


# ------------------------------------------------------------------ held equal to the project


def _numbers(n=200, seed=7):
    rng = np.random.default_rng(seed)
    rows = rng.uniform(0.0, 1.0, size=(n, 4)).tolist()
    # hand cases: no change, wrong sign, zero after, zero before
    rows += [[0.4, 0.4, 0.2, 0.3], [0.5, 0.3, 0.2, 0.3], [0.3, 0.0, 0.1, 0.1], [0.0, 0.5, 0.2, 0.6]]
    return rows


def test_openunlearning_R_equals_the_projects_on_the_same_numbers():
    compared = 0
    for ub, ua, rb, ra in _numbers():
        theirs = uds_R(ub, ua, rb, ra)
        mine = relearn_openunlearning(ub, ua, rb, ra).value
        assert mine == theirs or (mine is not None and math.isclose(mine, theirs, abs_tol=1e-15)), (ub, ua, rb, ra)
        compared += theirs is not None
    assert compared == 203  # every row but the no-change one has a number, on both sides


def test_openunlearning_Q_equals_the_papers_superscripts_and_differs_from_the_scripts_call():
    """Eq. 3's ``m^b / m^a`` with b = before and a = after is the script's ``uds_Q`` with its
    arguments as the paper names them (``m_unl_a`` = after); the script itself passes the
    value before the attack as ``m_unl_a``, which computes after / before: a recovery then
    scores 1, the opposite of Eq. 3. Both numbers are recorded here."""
    for before, after, *_ in _numbers():
        assert quant_openunlearning(before, after).value == pytest.approx(uds_Q(after, before), abs=1e-15)
    # the recovery case: 0.2 -> 0.8
    assert quant_openunlearning(0.2, 0.8).value == pytest.approx(0.25)
    assert uds_Q(0.2, 0.8) == 1.0  # the script's call order


def test_pool_robustness_equals_the_projects_aggregation():
    rows = _numbers(40, seed=3)
    R = [relearn_openunlearning(ub, ua, rb, ra).value for ub, ua, rb, ra in rows]
    Q = [quant_openunlearning(ub, ua).value for ub, ua, _, _ in rows]
    theirs_R = [uds_R(ub, ua, rb, ra) for ub, ua, rb, ra in rows]
    theirs_Q = [uds_Q(ua, ub) for ub, ua, _, _ in rows]
    mean = lambda xs: float(np.mean([x for x in xs if x is not None]))  # noqa: E731 - their np.mean over the defined ones
    assert mean(R) == pytest.approx(mean(theirs_R), abs=1e-15)
    assert harmonic(mean(R), mean(Q)).value == pytest.approx(uds_robustness(mean(theirs_R), mean(theirs_Q)), abs=1e-15)


def test_symmetric_equals_the_projects_published_formulas():
    for ub, ua, rb, ra in _numbers():
        assert relearn_symmetric(ub, ua, rb, ra).value == pytest.approx(uds_sym_R(ua - ub, ra - rb), abs=1e-15)
        assert quant_symmetric(ub, ua).value == pytest.approx(uds_sym_Q(ub, ua), abs=1e-15)


# ------------------------------------------------------------------ names and refusals


def test_formulas_by_name_with_sources():
    assert set(FORMULAS) == {"openunlearning", "uds-symmetric"}
    assert "arXiv 2506.12618" in formula("openunlearning").source
    assert "unlearning-depth-score" in formula("uds-symmetric").source
    with pytest.raises(FormulaError, match=r"unknown robustness formula 'uds-symetric'.*did you mean uds-symmetric"):
        formula("uds-symetric")


def test_refusals_name_the_metric():
    ou = formula("openunlearning")
    assert refusal("model_utility", None, ou, "R") == "model_utility: declares no knowledge form (higher = more knowledge), so R is refused"
    assert refusal("privleak", signed(-0.01, "x"), ou, "Q") == (
        "privleak: its knowledge form -0.01 * x is signed; openunlearning's Q = m_before / m_after needs a positive form")
    assert refusal("privleak", signed(-0.01, "x"), ou, "R") is None
    assert refusal("forget_Q_A_Prob", as_is("x"), ou, "Q") is None
    assert refusal("privleak", signed(-0.01, "x"), formula("uds-symmetric"), "Q") is None
