"""``evaldag run probes`` with ``hf:`` on the tiny fixture model: plumbing, caching, dedupe.

The tiny model's answers are nonsense (mostly undetected); what is checked is that all
probes' attempts go through the executor in one stage, that greedy repetitions and
identical texts are generated once, that a rerun asks nothing and that the output files
have the issue's shapes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evaldag.engine.cli.main import main

MODEL = Path(__file__).parents[1] / "fixtures" / "tiny-llama" / "target"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))


def test_hf_run_then_warm_rerun(tmp_path, capsys):
    args = ["run", "probes", "--generator", f"hf:{MODEL}", "--probes", "direct,discrimination_tamkin",
            "--sample-k", "4", "--num-repetitions", "2", "--max-new-tokens", "6", "--bootstrap-cycles", "50",
            "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu"]
    assert main(args) in (0, 1)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    ex = run["executor"]
    # direct: 4 items x 1 prompt x 2 reps; tamkin: 4 items x 3 prompts x 2 reps -> 32 attempts,
    # greedy: the 2 repetitions are one request -> 16 generations
    assert ex["requests"] == 32 and ex["unique"] == 16 and ex["generations"] == 16
    assert all(n["status"] == "computed" for n in run["nodes"].values())
    summary = json.loads((tmp_path / "out" / "PROBES_SUMMARY.json").read_text())
    assert "DirectProbe/fail_rate" in summary and "DiscriminationTamkinProbe/max_diff" in summary
    evals = json.loads((tmp_path / "out" / "PROBES_EVAL.json").read_text())
    # "reasons" only when a metric is NaN (written as null)
    assert set(evals["DirectProbe"]) - {"reasons"} == {"metrics", "intervals", "marks"}
    assert "Probe marks" in (tmp_path / "out" / "report.html").read_text()
    capsys.readouterr()
    assert main(args) in (0, 1)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["executor"]["requests"] == 0 and all(n["status"] == "cached" for n in run["nodes"].values())


def test_sampling_gives_each_attempt_its_own_seed(tmp_path):
    """--do-sample: repetitions are distinct requests, and the same seed gives the same answers."""
    from evaldag.benchmarks.probes.generators import from_spec
    from evaldag.metrics.probes.nodes import attempt_seed
    from evaldag.benchmarks.probes.spec import ProbesConfig, nodes
    from evaldag.engine import run

    cfg = ProbesConfig(probes=("direct",), sample_k=3, num_repetitions=2, max_new_tokens=5, do_sample=True,
                       calculate_cis=False, seed=7)
    first = run(nodes(cfg), {"model": from_spec(f"hf:{MODEL}", device="cpu")}, cache=tmp_path / "a")
    again = run(nodes(cfg), {"model": from_spec(f"hf:{MODEL}", device="cpu")}, cache=tmp_path / "b")
    assert first.executor["unique"] == 6 == first.executor["generations"]
    answers = first.value("PROBES/DirectProbe.attempts")["answers"]
    assert answers == again.value("PROBES/DirectProbe.attempts")["answers"]
    assert attempt_seed(7, 0) != attempt_seed(7, 1)
