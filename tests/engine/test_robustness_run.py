"""``evaldag run ... --attack``: the plain run and its attacked runs end with ``OUT/ROBUSTNESS.json``
(part of OUT's published set) and the report's robustness section, from those runs' own files."""

import json
import os
from pathlib import Path

import pytest

from ..conftest_models import register_mlp_scale
from ..inprocess import run_cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TARGET = FIX / "tiny-llama" / "target"


register_mlp_scale("quantize-half-test")  # scored by Q: a quantizer's stand-in, model role only


def _tofu(tmp, out, *extra):
    return run_cli(["run", "tofu", "--model", str(TARGET), "--data", FIX / "tofu_tiny", "--limit", "4",
                    "--metrics", "forget_Q_A_Prob,forget_truth_ratio", "--quiet", "--out", tmp / out,
                    "--cache-dir", tmp / "cache", *extra])


def test_an_attacked_run_writes_robustness_and_its_report_section(tmp_path):
    proc = _tofu(tmp_path, "out", "--attack", "quantize-half-test:0.5")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    link = out / "ROBUSTNESS.json"
    assert link.is_symlink() and os.readlink(link) == ".evaldag/current/ROBUSTNESS.json"
    d = json.loads(link.read_text())
    plain = json.loads((out / "TOFU_SUMMARY.json").read_text())
    attacked = json.loads((out / "attacks" / "quantize-half-test_0.5" / "TOFU_SUMMARY.json").read_text())
    rows = d["attacks"]["quantize-half-test_0.5"]["metrics"]
    p = rows["TOFU/forget_Q_A_Prob"]
    assert (p["before"], p["after"]) == (plain["forget_Q_A_Prob"], attacked["forget_Q_A_Prob"])
    assert p["Q"]["value"] == pytest.approx(min(1.0, plain["forget_Q_A_Prob"] / attacked["forget_Q_A_Prob"]), abs=1e-15)
    tr = rows["TOFU/forget_truth_ratio"]  # scored in its knowledge form, 1 - x
    assert tr["m_before"] == pytest.approx(1 - plain["forget_truth_ratio"], abs=1e-15)
    assert sum(p["change"]["n_items"].values()) == 4  # the paired test over the 4 forget items
    assert "Robustness under attacks on the model" in (out / "report.html").read_text()
    # a later plain run into the same OUT shows no stale robustness
    assert _tofu(tmp_path, "out").returncode == 0
    assert not link.exists() and "Robustness under attacks" not in (out / "report.html").read_text()


def test_the_nf4_round_trip_scored_by_Q(tmp_path):
    pytest.importorskip("bitsandbytes")
    proc = _tofu(tmp_path, "out", "--attack", "quantize:nf4")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    d = json.loads((out / "ROBUSTNESS.json").read_text())
    plain = json.loads((out / "TOFU_SUMMARY.json").read_text())
    after = json.loads((out / "attacks" / "quantize_nf4" / "TOFU_SUMMARY.json").read_text())
    row = d["attacks"]["quantize_nf4"]["metrics"]["TOFU/forget_truth_ratio"]
    assert d["attacks"]["quantize_nf4"]["kind"] == "quantize"
    m_b, m_a = 1 - plain["forget_truth_ratio"], 1 - after["forget_truth_ratio"]
    assert row["Q"]["value"] == pytest.approx(min(1.0, m_b / m_a), abs=1e-15) and after != plain


def test_a_disjoint_relearn_is_compared_on_the_rows_it_scored(tmp_path):
    """The disjoint relearn scores the half of the forget split it did not train on (its EVAL numbers
    them 0..n-1): before and after are both taken on those rows, paired row by row; a metric with no
    single stratum of items to pair is said not comparable instead of set against the whole split."""
    proc = _tofu(tmp_path, "out", "--attack", "relearn:disjoint=true", "--limit", "8",
                 "--metrics", "forget_Q_A_Prob,forget_truth_ratio,privleak")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    folder = out / "attacks" / "relearn_disjoint=true"
    rows = json.loads((folder / "run.json").read_text())["provenance"]["resources"]["model"]["derived"]["transform"]["scored_indices"]
    plain = json.loads((out / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]["value_by_index"]
    attacked = json.loads((folder / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]["value_by_index"]
    assert len(rows) == len(attacked) == len(plain) // 2 and rows == sorted(set(rows))
    d = json.loads((out / "ROBUSTNESS.json").read_text())["attacks"]["relearn_disjoint=true"]["metrics"]
    p = d["TOFU/forget_Q_A_Prob"]
    assert p["before"] == pytest.approx(sum(plain[str(i)]["prob"] for i in rows) / len(rows), abs=1e-12)
    assert p["after"] == pytest.approx(sum(v["prob"] for v in attacked.values()) / len(attacked), abs=1e-12)
    assert p["before_all_items"] == pytest.approx(sum(v["prob"] for v in plain.values()) / len(plain), abs=1e-12)
    assert p["change"]["n_items"] == {"items": len(rows)} and "unpaired_items" in p["change"]
    leak = d["TOFU/privleak"]
    assert leak["before"] is None and leak["change"]["verdict"].startswith("not comparable")


def test_a_disjoint_relearn_pairs_another_splits_metric_on_all_its_rows(tmp_path):
    """Only the relearn's own split is scored in part: a metric of another split (retain_Q_A_Prob)
    has the same items before and after, so it is paired on all of them, not refused as not comparable."""
    proc = _tofu(tmp_path, "out", "--attack", "relearn:disjoint=true", "--limit", "8",
                 "--metrics", "forget_Q_A_Prob,retain_Q_A_Prob")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    plain = json.loads((out / "TOFU_SUMMARY.json").read_text())["retain_Q_A_Prob"]
    after = json.loads((out / "attacks" / "relearn_disjoint=true" / "TOFU_SUMMARY.json").read_text())["retain_Q_A_Prob"]
    items = json.loads((out / "TOFU_EVAL.json").read_text())["retain_Q_A_Prob"]["value_by_index"]
    row = json.loads((out / "ROBUSTNESS.json").read_text())["attacks"]["relearn_disjoint=true"]["metrics"]["TOFU/retain_Q_A_Prob"]
    assert (row["before"], row["after"]) == (plain, after) and plain != after
    assert row["change"]["n_items"] == {"items": len(items)} and "unpaired_items" not in row["change"]
    assert row["change"]["delta"] == pytest.approx(after - plain, abs=1e-12)
