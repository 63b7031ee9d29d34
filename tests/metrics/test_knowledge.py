"""Each metric's declared knowledge form (higher = more knowledge), read through the benchmark
that names it: the direction is declared with the metric, never guessed from data."""

from __future__ import annotations

import math

import pytest

from evaldag.engine.registry import BENCHMARKS


@pytest.mark.parametrize("bench,name,formula,positive,x,y", [
    ("tofu", "forget_truth_ratio", "1 - x", True, 0.9, 0.1),     # closer_to_1_better: high when forgotten
    ("tofu", "retain_Truth_Ratio", "x", True, 0.7, 0.7),         # true_better: high when known
    ("tofu", "forget_Q_A_Prob", "x", True, 0.25, 0.25),
    ("tofu", "forget_Q_A_ROUGE", "x", True, 0.5, 0.5),
    ("tofu", "extraction_strength", "x", True, 0.5, 0.5),
    ("tofu", "mia_min_k", "|x - 0.5|", True, 0.2, 0.3),          # 0.5 is forgotten, either side is knowledge
    ("tofu", "mia_loss", "|x - 0.5|", True, 0.9, 0.4),
    ("tofu", "forget_quality", "-log10(x)", True, 1e-5, 5.0),
    ("tofu", "privleak", "-0.01 * x", False, -60.0, 0.6),        # signed: negative privleak is knowledge
    ("tofu", "forget_Q_A_ROUGE_jailbreak_prefix", "x", True, 0.5, 0.5),  # Jailbreak-ROUGE: ROUGE's own form
    ("muse", "forget_knowmem_ROUGE_paraphrase_template", "x", True, 0.4, 0.4),
    ("tofu", "retain_Q_A_ROUGE_filler", "x", True, 0.6, 0.6),    # every repeated generation metric: its parent's form
    ("tofu", "wf_Q_A_ROUGE_jailbreak_prefix", "x", True, 0.3, 0.3),
    ("muse", "retain_knowmem_ROUGE_in_context", "x", True, 0.2, 0.2),
    ("muse", "forget_verbmem_ROUGE", "x", True, 0.3, 0.3),
    ("muse", "privleak", "-0.01 * x", False, 20.0, -0.2),
])
def test_declared_forms(bench, name, formula, positive, x, y):
    k = BENCHMARKS.get(bench).knowledge(name)
    assert (k.formula, k.positive) == (formula, positive)
    assert k(x) == pytest.approx(y, abs=1e-12)
    assert k.why


def test_metrics_without_a_form_and_bad_values():
    tofu = BENCHMARKS.get("tofu")
    assert tofu.knowledge("model_utility") is None          # utility, not knowledge of the forget set
    assert tofu.knowledge("forget_Q_A_gibberish") is None
    assert tofu.knowledge("no_such_metric") is None
    assert tofu.knowledge("forget_Q_A_Prob_jailbreak_prefix") is None  # only a repeated generation metric takes a suffix
    assert tofu.knowledge("model_utility_filler") is None and tofu.knowledge("forget_Q_A_ROUGE_nope") is None
    assert BENCHMARKS.get("muse").knowledge("forget_verbmem_ROUGE_filler") is None  # verbmem is not repeated
    k = tofu.knowledge("forget_Q_A_Prob")
    assert k(None) is None and k(math.nan) is None and k(True) is None
    assert tofu.knowledge("forget_quality")(0.0) is None     # -log10(0) is not a number: missing, not inf
