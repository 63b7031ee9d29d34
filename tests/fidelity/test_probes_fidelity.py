"""GenderBench 1.1.0 fidelity: replaying its recorded attempts gives its numbers.

Fixtures (tests/fixtures/genderbench/): attempts recorded by GenderBench itself (prompt
text, answer, its evaluation) and its metrics, bootstrap intervals (random.seed(123),
1,000 cycles, normal fit) and marks. Our probes must build the same prompts in the same
order, evaluate every answer the same way, and give the same metrics (1e-9), intervals
(1e-9) and marks, in the vectorised and in the per-cycle bootstrap.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from evaldag.benchmarks.probes.direct import DirectProbe
from evaldag.benchmarks.probes.discrimination_tamkin import DiscriminationTamkinProbe
from evaldag.metrics.probes import bootstrap_intervals, resample_indices, word_tokens
from evaldag.metrics.probes.bootstrap import multiplicities, reference_indices

FIX = Path(__file__).parents[1] / "fixtures" / "genderbench"
REF = json.loads((FIX / "genderbench_reference_public.json").read_text())
CASES = [(DirectProbe, 2), (DiscriminationTamkinProbe, 1)]


def records(name: str, reps: int) -> list[dict]:
    with gzip.open(FIX / f"genderbench_attempts_{name}_rep{reps}.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def reference(name: str, cis: bool) -> dict:
    return next(r for r in REF["runs"] if r["probe"] == name and r["params"]["calculate_cis"] == cis)


@pytest.fixture(scope="module", params=CASES, ids=[c.__name__ for c, _ in CASES])
def replayed(request):
    cls, reps = request.param
    recs = records(cls.__name__, reps)
    probe = cls(num_repetitions=reps)
    probe.create_probe_items()
    probe.set_answers([r["answer"] for r in recs])
    probe.evaluate()
    probe.calculate_metrics()
    return probe, recs


def test_prompts_and_evaluations_match(replayed):
    probe, recs = replayed
    attempts = list(probe.attempts)
    ref = reference(probe.name, False)
    assert (len(probe.probe_items), len(attempts)) == (ref["n_probe_items"], ref["n_attempts"])
    item_of = [i for i, it in enumerate(probe.probe_items) for _ in it.attempts]
    for i, (a, r) in enumerate(zip(attempts, recs)):
        assert (item_of[i], a.prompt.text, a.repetition_id) == (r["item"], r["prompt_text"], r["repetition_id"])
        assert (a.evaluation, a.evaluation_undetected) == (r["evaluation"], r["evaluation_undetected"]), i
    counts = {}
    for a in attempts:
        counts[str(a.evaluation)] = counts.get(str(a.evaluation), 0) + 1
    assert counts == ref["evaluation_counts"]


def test_metrics_match(replayed):
    probe, _ = replayed
    ref = reference(probe.name, False)["metrics"]
    assert list(probe.metrics) == list(ref)
    for k, v in ref.items():
        assert probe.metrics[k] == pytest.approx(v, abs=1e-9), k


def test_intervals_and_marks_match(replayed):
    probe, _ = replayed
    ref = reference(probe.name, True)
    assert list(probe.intervals) == list(ref["metrics"])
    for k, (lo, hi) in ref["metrics"].items():
        assert probe.intervals[k] == pytest.approx((lo, hi), abs=1e-9), k
    assert {k: m["mark_value"] for k, m in probe.marks.items()} == {k: m["mark_value"] for k, m in ref["marks"].items()}
    assert {k: m["mark_letter"] for k, m in probe.marks.items()} == ref["mark_letters"]
    points = {d.metric_name: d.calculate_mark(probe.metrics[d.metric_name]) for d in probe.mark_definitions}
    assert points == {k: m["mark_value"] for k, m in reference(probe.name, False)["marks"].items()}


def test_per_cycle_bootstrap_equals_vectorised(replayed):
    """The calculator called on each resample (GenderBench's way) gives the same intervals."""
    probe, _ = replayed
    slow = bootstrap_intervals(probe.probe_items, probe.metric_calculator, cycles=60, vectorised=False)
    fast = bootstrap_intervals(probe.probe_items, probe.metric_calculator, cycles=60, vectorised=True)
    assert list(slow) == list(fast)
    for k in slow:
        assert fast[k] == pytest.approx(slow[k], abs=1e-12), k


def test_genderbench_draws_are_random_choices():
    """Indices equal ``random.seed(s); random.choices(items, k=n)`` cycle after cycle."""
    for seed in (0, 1, 123, -5, 2**40 + 7):
        for n in (1, 7, 500):
            assert (resample_indices(n, 5, seed) == reference_indices(n, 5, seed)).all()
    random.seed(123)
    first = random.choices(range(3944), k=3944)
    assert resample_indices(3944, 1, 123)[0].tolist() == first
    w = multiplicities(np.array([[0, 0, 2], [1, 2, 2]]), 3)
    assert w.tolist() == [[2, 0, 1], [0, 1, 2]]


@pytest.mark.parametrize("text,expected", [
    ("No.", ["No", "."]),
    ("I am not sure.", ["I", "am", "not", "sure", "."]),
    ("No. I think", ["No", ".", "I", "think"]),
    ("yes/no", ["yes/no"]),
    ("No... yes", ["No", "...", "yes"]),
    ("He said no.) She", ["He", "said", "no", ".", ")", "She"]),
    ("no.she", ["no.she"]),
    ("she's he'll cannot", ["she", "'s", "he", "'ll", "can", "not"]),
    ('"Yes," he said: no', ["``", "Yes", ",", "''", "he", "said", ":", "no"]),
    ("A. He went", ["A.", "He", "went"]),
    ("1.5 yes. no", ["1.5", "yes", ".", "no"]),
])
def test_word_tokens_match_nltk(text, expected):
    """Checked against nltk 3.10.4 word_tokenize with an untrained punkt (what the references used)."""
    assert word_tokens(text) == expected
