"""--select rules over SUMMARY names: the chosen checkpoint(s) and the reason, hand-checked."""

import pytest

from evaldag.engine.selection import RuleError, parse, select

ROWS = [  # (checkpoint, SUMMARY), in step order
    ("checkpoint-4", {"forget_quality": 0.01, "model_utility": 0.70}),
    ("checkpoint-8", {"forget_quality": 0.06, "model_utility": 0.62}),
    ("checkpoint-12", {"forget_quality": 0.30, "model_utility": 0.62}),
    ("checkpoint-16", {"forget_quality": 0.20, "model_utility": 0.40}),
    ("checkpoint-20", {"forget_quality": {"value": None, "reason": "no holdout"}, "model_utility": 0.9}),
]


def test_max_where_picks_the_best_qualifying_checkpoint_ties_to_the_earliest():
    s = select("max model_utility where forget_quality >= 0.05", ROWS)
    assert s.chosen == ["checkpoint-8"]  # 8 and 12 tie at 0.62: the earlier step
    assert s.why == ("checkpoint-8: the highest model_utility (0.62) of 3 checkpoints with forget_quality >= 0.05; "
                     "1 fail forget_quality >= 0.05; 1 without a value for model_utility, forget_quality")
    assert s.values == {"checkpoint-8": {"model_utility": 0.62, "forget_quality": 0.06}}


def test_min_with_two_conditions_and_no_condition():
    assert select("min forget_quality where model_utility > 0.5 and forget_quality != 0.01", ROWS).chosen == ["checkpoint-8"]
    assert select("max model_utility", ROWS).chosen == ["checkpoint-20"]  # no condition: the null forget_quality is not read
    none = select("max model_utility where forget_quality >= 0.5", ROWS)
    assert none.chosen == [] and none.why.startswith("no checkpoint qualifies (5 checked; 4 fail forget_quality >= 0.5")


def test_pareto_front_of_forget_quality_and_model_utility():
    # (fq, mu): 4=(.01,.70) 8=(.06,.62) 12=(.30,.62) 16=(.20,.40); 12 beats 8 (same mu, higher fq) and 16
    tofu = (("max", "forget_quality"), ("max", "model_utility"))  # TOFU's trade-off: a bare pareto's axes
    s = select("pareto", ROWS, tofu)
    assert s.chosen == ["checkpoint-4", "checkpoint-12"]
    assert s.why.startswith("the Pareto set of max forget_quality, max model_utility: checkpoint-4, checkpoint-12 (2 of 4)")
    assert select("pareto min forget_quality, max model_utility", ROWS).chosen == ["checkpoint-4"]


def test_unknown_names_and_bad_rules_are_one_line_with_close_matches():
    with pytest.raises(RuleError, match=r"no checkpoint has a metric 'model_utilty'; did you mean model_utility\?"):
        select("max model_utilty where forget_quality >= 0.05", ROWS)
    with pytest.raises(RuleError, match=r"cannot read the condition 'forget_quality => 0.05'"):
        parse("max model_utility where forget_quality => 0.05")
    with pytest.raises(RuleError, match="a rule starts with max, min or pareto"):
        parse("best model_utility")
    with pytest.raises(RuleError, match="pareto takes two metrics"):
        parse("pareto a, b, c")
    with pytest.raises(RuleError, match="declare no trade-off for a bare pareto; name its two metrics"):
        parse("pareto")  # the engine knows no metric names of its own
    assert parse("max model_utility where forget_quality >= 5e-2").conditions == (("forget_quality", ">=", 0.05),)
