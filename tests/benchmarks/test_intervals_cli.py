"""``--bootstrap-resamples`` on TOFU: intervals in their own files, none of open-unlearning's files
touched, and on a warm cache not one sequence forwarded."""

import json
import re
from pathlib import Path

from evaldag.engine import cli

FIX = Path(__file__).parents[1] / "fixtures"
METRICS = "forget_Q_A_Prob,forget_truth_ratio,forget_quality,model_utility,mia_min_k,privleak"


def _run(tmp, name, *extra):
    out = tmp / name
    argv = ["run", "tofu", "--quiet", "--model", str(FIX / "tiny-llama" / "target"), "--data", str(FIX / "tofu_tiny"),
            "--metrics", METRICS, "--limit", "12", "--retain-logs", str(FIX / "open_unlearning" / "retain_TOFU_EVAL.json"),
            "--out", str(out), "--cache-dir", str(tmp / "cache"), *extra]
    assert cli.main(argv) == 0
    return out


def test_warm_rerun_with_intervals_forwards_nothing(tmp_path):
    cold = _run(tmp_path, "cold")
    assert not (cold / "TOFU_INTERVALS_EVAL.json").exists()  # off unless asked
    warm = _run(tmp_path, "warm", "--bootstrap-cycles", "200", "--seed", "5")  # probes' spelling, an alias
    run = json.loads((warm / "run.json").read_text())
    assert run["executor"]["sequences_forwarded"] == 0
    for f in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):  # open-unlearning's files, byte for byte
        assert (warm / f).read_bytes() == (cold / f).read_bytes(), f
    evals = json.loads((cold / "TOFU_EVAL.json").read_text())
    ivs = json.loads((warm / "TOFU_INTERVALS_EVAL.json").read_text())
    assert set(ivs) == set(METRICS.split(","))
    for name, iv in ivs.items():
        assert iv["n_resamples"] == 200 and iv["seed"] == 5, name
        assert abs(iv["agg_value"] - evals[name]["agg_value"]) <= 1e-9 * max(1.0, abs(evals[name]["agg_value"])), name
        lo, hi = iv["percentile"]
        assert lo <= iv["agg_value"] <= hi or name == "forget_quality", name
    assert ivs["forget_quality"]["statistic"] == "ks" and ivs["forget_quality"]["n_items"] == {"model": 12, "retain": 40}  # the logs hold all 40: unpaired
    assert ivs["model_utility"]["n_items"] == {"retain": 12, "ra": 12, "wf": 12}
    page = (warm / "report.html").read_text()
    lo, hi = ivs["forget_Q_A_Prob"]["percentile"]
    assert 'id="intervals"' in page and f"{ivs['forget_Q_A_Prob']['agg_value']:.4g} ± {(hi - lo) / 2:.4g}" in page
    # the metrics table: the INTERVALS file's percentile beside the value, its level and resamples in the caption
    table = page[page.index('data-bench="TOFU">'):]
    table = table[: table.index("</table>")]
    assert '<td>forget_Q_A_Prob</td>' in table and f'<span class="ed-ci">[{lo:.4g}, {hi:.4g}]</span>' in table
    assert "95% percentile bootstrap intervals over items, 200 resamples" in table
    assert 'class="ed-ci"' not in (cold / "report.html").read_text()  # a run without intervals: the numbers alone
    mlo, mhi = ivs["mia_min_k"]["percentile"]  # and the ROC legend: the AUC's interval beside it
    assert re.search(rf">mia_min_k · AUC \d\.\d{{3}} \[{mlo:.3f}, {mhi:.3f}\]</text>", page)
    again = _run(tmp_path, "again", "--bootstrap-resamples", "200", "--seed", "5")  # the one spelling: the same nodes
    assert json.loads((again / "TOFU_INTERVALS_EVAL.json").read_text()) == ivs
    nodes = json.loads((again / "run.json").read_text())["nodes"]
    assert all(n["status"] == "cached" for n in nodes.values())
    # on request, the intervals in TOFU_SUMMARY.json too, under "intervals"; every other key as it was
    asked = _run(tmp_path, "asked", "--bootstrap-resamples", "200", "--seed", "5", "--summary-intervals")
    summary, plain = json.loads((asked / "TOFU_SUMMARY.json").read_text()), json.loads((cold / "TOFU_SUMMARY.json").read_text())
    assert {k: v for k, v in summary.items() if k != "intervals"} == plain
    assert (asked / "TOFU_EVAL.json").read_bytes() == (cold / "TOFU_EVAL.json").read_bytes()
    assert set(summary["intervals"]) == set(ivs)
    for name, iv in summary["intervals"].items():
        assert iv == {"percentile": ivs[name]["percentile"], "BCa": ivs[name]["BCa"], "confidence_level": 0.95,
                      "n_resamples": 200, "seed": 5}, name


def test_summary_intervals_without_resamples_is_one_line(tmp_path, capsys):
    argv = ["run", "tofu", "--quiet", "--model", str(FIX / "tiny-llama" / "target"), "--data", str(FIX / "tofu_tiny"),
            "--summary-intervals", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["evaldag: error: summary_intervals (--summary-intervals) wants bootstrap_resamples > 0 "
                   "(--bootstrap-resamples N): there are no intervals to write"]
