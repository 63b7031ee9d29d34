"""``evaldag robustness OUT``: ROBUSTNESS.json from a plain run's folder and its attacked runs,
each metric in its knowledge form, refusals by name, R undefined inside item-level noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine import cli

B = [0.1 + 0.01 * i for i in range(10)]


def _prob(values):
    return {"agg_value": float(np.mean(values)), "value_by_index": {str(i): {"prob": v, "avg_loss": 1.0} for i, v in enumerate(values)}}


def _folder(path: Path, prob, para, privleak, utility) -> Path:
    evals = {"forget_Q_A_Prob": _prob(prob), "forget_Q_A_PARA_Prob": _prob(para),
             "privleak": {"agg_value": privleak}, "model_utility": {"agg_value": utility}}
    path.mkdir(parents=True)
    (path / "TOFU_EVAL.json").write_text(json.dumps(evals))
    (path / "TOFU_SUMMARY.json").write_text(json.dumps({k: v["agg_value"] for k, v in evals.items()}))
    (path / "run.json").write_text(json.dumps({"nodes": {}, "benchmarks": ["tofu"], "provenance": {}}))
    return path


@pytest.fixture
def runs(tmp_path):
    out, ret = tmp_path / "unl", tmp_path / "ret"
    noisy = [b + (0.2 if i % 2 == 0 else -0.1) for i, b in enumerate(B)]  # mean change +0.05, inside the noise
    _folder(out, B, B, -40.0, 0.6)
    _folder(out / "attacks" / "quantize-nf4", [b + 0.3 for b in B], B, -60.0, 0.59)
    _folder(out / "attacks" / "relearn-forget", [b + 0.4 for b in B], noisy, -70.0, 0.61)
    R0 = [b + 0.2 for b in B]
    _folder(ret, R0, R0, 0.0, 0.6)
    _folder(ret / "attacks" / "relearn-forget", [r + 0.1 for r in R0], [r + 0.1 for r in R0], -10.0, 0.6)
    return out, ret


def test_scores_refusals_and_noise(runs, capsys):
    out, ret = runs
    assert cli.main(["robustness", str(out), "--retain", str(ret), "--seed", "1"]) == 0
    d = json.loads((out / "ROBUSTNESS.json").read_text())
    assert d["formula"]["name"] == "openunlearning" and "2506.12618" in d["formula"]["source"]
    q = d["attacks"]["quantize-nf4"]["metrics"]
    before, after = np.mean(B), np.mean(B) + 0.3
    assert q["TOFU/forget_Q_A_Prob"]["Q"]["value"] == pytest.approx(before / after, abs=1e-12)
    assert q["TOFU/forget_Q_A_Prob"]["change"]["verdict"] == "B > A"
    assert q["TOFU/forget_Q_A_PARA_Prob"]["Q"]["value"] == 1.0  # no change
    assert q["TOFU/privleak"]["Q"]["refused"].startswith("privleak: its knowledge form -0.01 * x is signed")
    assert q["TOFU/model_utility"]["Q"]["refused"] == "model_utility: declares no knowledge form (higher = more knowledge), so Q is refused"
    assert q["TOFU/model_utility"]["before"] == 0.6 and q["TOFU/model_utility"]["after"] == 0.59  # still written
    r = d["attacks"]["relearn-forget"]["metrics"]
    assert r["TOFU/forget_Q_A_Prob"]["R"]["value"] == pytest.approx(0.1 / 0.4, abs=1e-12)
    para = r["TOFU/forget_Q_A_PARA_Prob"]
    assert para["R"]["value"] is None and "inside the item-level noise" in para["R"]["reason"]
    assert para["change"]["verdict"] == "inside the noise" and para["change"]["exact"]
    # privleak is signed: R (a difference) takes it: D_unl = -0.01 * (-70 - -40) = 0.3, D_ret = 0.1
    assert r["TOFU/privleak"]["R"]["value"] == pytest.approx(0.1 / 0.3, abs=1e-12)
    hm = {h["metric"]: h["HM"] for h in d["hm"]}
    qv = before / after
    assert hm["TOFU/forget_Q_A_Prob"]["value"] == pytest.approx(2 * 0.25 * qv / (0.25 + qv), abs=1e-12)
    assert hm["TOFU/forget_Q_A_PARA_Prob"]["value"] is None and hm["TOFU/privleak"]["refused"]
    text = capsys.readouterr().out
    assert "attack quantize-nf4 (scored by Q)" in text and "refused" in text and "undef." in text


def test_relearning_without_control_and_symmetric_formula(runs, tmp_path):
    out, _ = runs
    assert cli.main(["robustness", str(out), "--formula", "uds-symmetric", "--bootstrap-resamples", "0",
                     "--to", str(tmp_path / "r.json")]) == 0
    d = json.loads((tmp_path / "r.json").read_text())
    r = d["attacks"]["relearn-forget"]["metrics"]["TOFU/forget_Q_A_Prob"]["R"]
    assert r["refused"].startswith("forget_Q_A_Prob: R needs the retain model relearned")
    q = d["attacks"]["quantize-nf4"]["metrics"]
    assert q["TOFU/privleak"]["Q"]["value"] == pytest.approx(1 - 0.2 / (0.4 + 0.6 + 1e-8), abs=1e-12)  # no ratio: no refusal
    assert q["TOFU/forget_Q_A_Prob"]["change"] is None


def test_bad_input_is_one_line(runs, tmp_path, capsys):
    out, _ = runs
    assert cli.main(["robustness", str(out), "--formula", "openunlearnin"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evaldag: error: unknown robustness formula 'openunlearnin'") and "did you mean openunlearning" in err
    assert len(err.splitlines()) == 1
    plain = tmp_path / "plain"
    _folder(plain, B, B, 0.0, 0.5)
    assert cli.main(["robustness", str(plain)]) == 2
    assert "no attacked runs" in capsys.readouterr().err
    assert cli.main(["robustness", str(out), "--attacked", "quantize"]) == 2
    assert "expected NAME=DIR" in capsys.readouterr().err


def test_report_section(runs):
    from evaldag.engine.report import build_report_html

    out, ret = runs
    assert cli.main(["robustness", str(out), "--retain", str(ret), "--bootstrap-resamples", "0"]) == 0
    html = build_report_html([out])
    assert "Robustness under attacks on the model" in html and "quantize-nf4 (scored by Q)" in html
    assert ">refused<" in html and "HM(R, Q)" in html
    assert "Robustness under attacks" not in build_report_html([ret])  # no ROBUSTNESS.json: no section
