"""A sweep's report: each checkpoint tested against the previous one item by item, and interval
bars on the training curves where the runs wrote intervals."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine.report import build_report_html
from evaldag.engine.uncertainty import Sample, paired_series

PROB = {"checkpoint-4": [0.9, 0.8, 0.95, 0.85, 0.9, 0.7, 0.88], "checkpoint-8": [0.5, 0.6, 0.4, 0.55, 0.3, 0.5, 0.45],
        "checkpoint-12": [0.52, 0.58, 0.41, 0.5, 0.33, 0.49, 0.47]}


def _folders(tmp_path, intervals=True):
    out = []
    for name, probs in PROB.items():
        d = tmp_path / name
        d.mkdir()
        m = float(np.mean(probs))
        block = {"agg_value": m, "value_by_index": {str(i): {"prob": p, "avg_loss": 1.0} for i, p in enumerate(probs)}}
        (d / "TOFU_EVAL.json").write_text(json.dumps({"forget_Q_A_Prob": block}))
        (d / "TOFU_SUMMARY.json").write_text(json.dumps({"forget_Q_A_Prob": m}))
        if intervals:
            (d / "TOFU_INTERVALS_EVAL.json").write_text(json.dumps({"forget_Q_A_Prob": {
                "agg_value": m, "percentile": [m - 0.05, m + 0.05], "confidence_level": 0.95, "n_resamples": 1000, "seed": 0}}))
        (d / "run.json").write_text(json.dumps({"benchmarks": ["tofu"], "provenance": {"resources": {"model": {"path": f"ck/{name}"}}}}))
        out.append(d)
    return out


def test_each_checkpoint_against_the_previous_in_the_report(tmp_path):
    html = build_report_html(_folders(tmp_path))
    sec = html[html.index('id="paired-checkpoints"'):]
    sec = sec[: sec.index("<h2", 10)] if "<h2" in sec[10:] else sec
    rows = re.findall(r"<tr><td>TOFU/forget_Q_A_Prob</td><td>([\w-]+) → ([\w-]+)</td><td>([^<]+)</td>.*?<td>([^<]+)</td><td>([^<]+)</td></tr>", sec)
    assert [(a, b) for a, b, *_ in rows] == [("checkpoint-4", "checkpoint-8"), ("checkpoint-8", "checkpoint-12")]
    runs = {n: Sample(("items",), (tuple(str(i) for i in range(7)),), (np.array(v),), lambda x: float(np.mean(x))) for n, v in PROB.items()}
    want = paired_series(runs, "previous", 1000, 0)
    assert float(rows[0][2]) == pytest.approx(want[0]["delta"], abs=5e-5)
    assert rows[0][3] == str(want[0]["items_needed"])
    assert rows[0][4] == "B &lt; A" and rows[1][4] == "inside the noise"
    assert "2 tests, Holm" in sec


def test_interval_bars_on_the_curves(tmp_path):
    html = build_report_html(_folders(tmp_path))
    curve = html[html.index('data-plot="curve"'):]
    curve = curve[: curve.index("</svg>")]
    assert len(re.findall(r'class="ed-bar"', curve)) == 3
    assert "95% interval [" in curve
    (tmp_path / "x").mkdir()
    plain = build_report_html(_folders(tmp_path / "x", intervals=False))
    assert 'class="ed-bar"' not in plain and 'data-plot="curve"' in plain
    assert 'id="paired-checkpoints"' not in plain  # runs that asked for no intervals: no paired tests


def test_forget_quality_and_privleak_with_the_retain_logs_run_json_names(tmp_path):
    ou = Path(__file__).parents[1] / "fixtures" / "open_unlearning"
    retain = ou / "retain_TOFU_EVAL.json"
    folders = []
    for name, src in (("step-1", "target"), ("step-2", "retain")):
        d = tmp_path / name
        d.mkdir()
        evals = json.loads((ou / f"{src}_TOFU_EVAL.json").read_text())
        keep = {k: evals[k] for k in ("forget_truth_ratio", "forget_quality", "mia_min_k", "privleak")}
        (d / "TOFU_EVAL.json").write_text(json.dumps(keep))
        (d / "TOFU_INTERVALS_EVAL.json").write_text(json.dumps({"forget_quality": {"n_resamples": 50, "seed": 2}}))
        res = {"model": {"path": name}, "tofu_retain_logs": {"source": str(retain)}}
        (d / "run.json").write_text(json.dumps({"benchmarks": ["tofu"], "provenance": {"resources": res}}))
        folders.append(d)
    html = build_report_html(folders)
    sec = html[html.index('id="paired-checkpoints"'):]
    assert "TOFU/forget_quality (KS statistic)</td><td>step-1 → step-2" in sec
    assert "TOFU/privleak</td><td>step-1 → step-2" in sec and "50 resamples, seed 2" in sec


def test_each_checkpoint_against_the_first_holm_over_every_pair_and_metric(tmp_path, capsys):
    """``against="first"`` (``evaldag report --against first``): every run against the baseline,
    the p-values Holm-adjusted over the 2 pairs x 2 metrics together."""
    from evaldag.engine import cli
    from evaldag.engine.uncertainty import adjust

    folders = _folders(tmp_path)
    other = {n: [1 - p for p in v[::-1]] for n, v in PROB.items()}  # a second metric of the same runs
    for d in folders:
        evals = json.loads((d / "TOFU_EVAL.json").read_text())
        probs = other[d.name]
        evals["retain_Q_A_Prob"] = {"agg_value": float(np.mean(probs)),
                                    "value_by_index": {str(i): {"prob": p, "avg_loss": 1.0} for i, p in enumerate(probs)}}
        (d / "TOFU_EVAL.json").write_text(json.dumps(evals))
    assert cli.main(["report", *map(str, folders), "--against", "first", "--out", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    sec = html[html.index('id="paired-checkpoints"'):]
    assert "Each run against the first (the baseline)" in sec and "4 tests, Holm" in sec
    rows = re.findall(r"<tr><td>TOFU/(\w+)</td><td>([\w-]+) → ([\w-]+)</td><td>([^<]+)</td><td>[^<]*</td>"
                      r"<td>([^<]+)</td><td>([^<]+)</td>", sec)
    assert [r[:3] for r in rows] == [("forget_Q_A_Prob", "checkpoint-4", "checkpoint-8"), ("forget_Q_A_Prob", "checkpoint-4", "checkpoint-12"),
                                     ("retain_Q_A_Prob", "checkpoint-4", "checkpoint-8"), ("retain_Q_A_Prob", "checkpoint-4", "checkpoint-12")]

    def sample(v):
        return Sample(("items",), (tuple(str(i) for i in range(7)),), (np.array(v),), lambda x: float(np.mean(x)))

    want = adjust(paired_series({n: sample(v) for n, v in PROB.items()}, "first", 1000, 0)
                  + paired_series({n: sample(v) for n, v in other.items()}, "first", 1000, 0))
    assert [float(r[3]) for r in rows] == pytest.approx([w["delta"] for w in want], abs=5e-5)
    assert [float(r[4]) for r in rows] == pytest.approx([w["p_value"] for w in want], rel=1e-3)
    assert [float(r[5]) for r in rows] == pytest.approx([w["p_holm"] for w in want], rel=1e-3)
    assert want[1]["delta"] == pytest.approx(np.mean(PROB["checkpoint-12"]) - np.mean(PROB["checkpoint-4"]))
    m = min(w["p_value"] for w in want)
    assert min(w["p_holm"] for w in want) == pytest.approx(min(1.0, 4 * m))  # Holm over all 4, not per metric
    prev = build_report_html(folders)
    assert "checkpoint-8 → checkpoint-12" in prev and "checkpoint-8 → checkpoint-12" not in sec
    with pytest.raises(ValueError, match="against='last': choose one of previous, first"):
        build_report_html(folders, against="last")
    with pytest.raises(SystemExit) as e:
        cli.main(["report", *map(str, folders), "--against", "last"])
    assert e.value.code == 2
    assert "evaldag: error: argument --against: invalid choice: 'last' (choose from 'previous', 'first')" in capsys.readouterr().err
