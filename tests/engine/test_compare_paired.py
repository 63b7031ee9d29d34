"""``evaldag compare A B``: the paired test of each metric from the runs' per-item values."""

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from evaldag.engine import cli

OU = Path(__file__).parents[1] / "fixtures" / "open_unlearning"


def _folder(path: Path, evals: dict) -> Path:
    path.mkdir(parents=True)
    (path / "TOFU_EVAL.json").write_text(json.dumps(evals))
    (path / "TOFU_SUMMARY.json").write_text(json.dumps({k: v["agg_value"] for k, v in evals.items()}))
    (path / "run.json").write_text(json.dumps({"nodes": {}, "benchmarks": ["tofu"], "provenance": {}}))
    return path


def _prob(values):
    return {"agg_value": float(np.mean(values)), "value_by_index": {str(i): {"prob": v, "avg_loss": 1.0} for i, v in enumerate(values)}}


def test_exact_permutation_p_value_on_five_items(tmp_path, capsys):
    a, b = [0.1, 0.4, 0.3, 0.5, 0.2], [0.3, 0.5, 0.2, 0.9, 0.6]
    fa, fb = _folder(tmp_path / "a", {"forget_Q_A_Prob": _prob(a)}), _folder(tmp_path / "b", {"forget_Q_A_Prob": _prob(b)})
    assert cli.main(["compare", str(fa), str(fb), "--out", str(tmp_path / "d.json")]) == 0
    d = np.subtract(b, a)
    by_hand = sum(abs(np.sum(d * s)) >= abs(d.sum()) - 1e-12 for s in itertools.product((1, -1), repeat=5)) / 32
    row = json.loads((tmp_path / "d.json").read_text())["metrics"][0]["paired"]
    assert row["exact"] and row["permutations"] == 32 and row["p_value"] == pytest.approx(by_hand) == 6 / 32
    assert row["verdict"] == "inside the noise"
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("TOFU/forget_Q_A_Prob") and "noise" in x)
    assert line.endswith("inside the noise  (exact)")


def test_paired_interval_and_holm_on_the_fixture_runs(tmp_path):
    runs = {}
    for m in ("retain", "target"):
        runs[m] = _folder(tmp_path / m, json.loads((OU / f"{m}_TOFU_EVAL.json").read_text()))
    assert cli.main(["compare", str(runs["retain"]), str(runs["target"]), "--bootstrap-resamples", "1000", "--seed", "4",
                     "--out", str(tmp_path / "d.json")]) == 0
    rows = {r["metric"]: r for r in json.loads((tmp_path / "d.json").read_text())["metrics"]}
    assert "paired" not in rows["forget_quality"]  # no retain side in an EVAL file: no per-item form
    p = rows["forget_Q_A_Prob"]["paired"]
    vals = {m: np.array([json.loads((OU / f"{m}_TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]["value_by_index"][str(i)]["prob"]
                         for i in range(40)]) for m in ("retain", "target")}
    lo, hi = stats.bootstrap((vals["target"] - vals["retain"],), np.mean, n_resamples=1000, rng=np.random.default_rng(4),
                             method="percentile").confidence_interval
    assert p["percentile"] == pytest.approx([lo, hi], rel=1e-9) and p["verdict"] == "B > A"
    assert rows["forget_truth_ratio"]["paired"]["verdict"] == "inside the noise"
    assert rows["model_utility"]["paired"]["n_items"] == {"retain": 40, "ra": 20, "wf": 24}
    tested = sorted((r["paired"]["p_value"], r["paired"]["p_holm"]) for r in rows.values() if "paired" in r)
    m = len(rows) - 2  # all but forget quality and privleak (they need the retain side)
    assert len(tested) == m == 31 and tested[0][1] == pytest.approx(min(1.0, m * tested[0][0]))
    assert all(h >= p for p, h in tested)


def _pool(path: Path, rows) -> Path:
    path.mkdir()
    for i, values in enumerate(rows):
        _folder(path / f"seed-{i}", {"forget_Q_A_Prob": _prob(list(values))})
    return path


def test_pooled_seeds_cluster_bootstrap_of_the_difference(tmp_path, capsys):
    rng = np.random.default_rng(0)
    A = rng.uniform(0.2, 0.6, (3, 8))
    B = rng.uniform(0.3, 0.7, (2, 8)) + np.array([[0.0], [0.2]])
    fa, fb = _pool(tmp_path / "ga", A), _pool(tmp_path / "npo", B)
    assert cli.main(["compare", str(fa), str(fb)]) == 2
    assert "--pool" in capsys.readouterr().err
    assert cli.main(["compare", str(fa), str(fb), "--pool", "--bootstrap-resamples", "300", "--seed", "5",
                     "--out", str(tmp_path / "d.json")]) == 0
    row = json.loads((tmp_path / "d.json").read_text())["metrics"][0]
    assert row["a"] == pytest.approx(A.mean()) and row["b"] == pytest.approx(B.mean())
    p = row["paired"]
    # by hand: A's seeds, B's seeds and the items drawn independently; B's mean over its drawn seeds minus A's
    ref = stats.bootstrap((np.arange(3), np.arange(2), np.arange(8)),
                          lambda sa, sb, i: float(B[np.ix_(sb, i)].mean() - A[np.ix_(sa, i)].mean()),
                          vectorized=False, n_resamples=300, method="percentile", rng=np.random.default_rng(5))
    assert p["percentile"] == pytest.approx(list(ref.confidence_interval), rel=1e-12)
    assert p["delta"] == pytest.approx(B.mean() - A.mean())
    assert p["n_items"] == {"seeds A": 3, "seeds B": 2, "items": 8} and p["p_value"] is None
    assert p["verdict"] == ("inside the noise" if ref.confidence_interval[0] <= 0 <= ref.confidence_interval[1]
                            else ("B > A" if p["delta"] > 0 else "B < A"))
    assert p["between_seeds_sd"]["b"] == pytest.approx(float(np.std(B.mean(axis=1), ddof=1)))


def test_forget_quality_and_privleak_read_the_retain_logs_the_runs_named(tmp_path):
    retain_file = OU / "retain_TOFU_EVAL.json"
    runs = {}
    for m in ("target", "retain"):
        evals = json.loads((OU / f"{m}_TOFU_EVAL.json").read_text())
        if m == "retain":  # the retain model against its own logs
            evals["forget_quality"], evals["privleak"] = {"agg_value": 1.0}, {"agg_value": 0.0}
        runs[m] = _folder(tmp_path / m, evals)
        res = {"model": {"path": m}, "tofu_retain_logs": {"type": "dict", "source": str(retain_file)}}
        (runs[m] / "run.json").write_text(json.dumps({"nodes": {}, "benchmarks": ["tofu"], "provenance": {"resources": res}}))
    assert cli.main(["compare", str(runs["target"]), str(runs["retain"]), "--bootstrap-resamples", "200", "--seed", "1",
                     "--out", str(tmp_path / "d.json")]) == 0
    rows = {r["metric"]: r for r in json.loads((tmp_path / "d.json").read_text())["metrics"]}
    fr = {m: np.array([json.loads((OU / f"{m}_TOFU_EVAL.json").read_text())["forget_truth_ratio"]["value_by_index"][str(i)]["score"]
                       for i in range(40)]) for m in ("target", "retain")}
    fq = rows["forget_quality"]["paired"]
    assert fq["statistic"] == "ks"  # B - A on the KS statistic against the retain model's items
    t, r = fr["target"], fr["retain"]
    assert fq["delta"] == pytest.approx(0.0 - stats.ks_2samp(t, r).statistic)
    ref = stats.bootstrap((np.arange(40),), lambda i: stats.ks_2samp(r[i], r[i]).statistic - stats.ks_2samp(t[i], r[i]).statistic,
                          vectorized=False, n_resamples=200, method="percentile", rng=np.random.default_rng(1))
    assert fq["percentile"] == pytest.approx(list(ref.confidence_interval), abs=1e-12)
    pl = rows["privleak"]["paired"]
    assert pl["delta"] == pytest.approx(rows["privleak"]["delta"], rel=1e-9) and pl["percentile"] is not None
    assert "p_holm" in fq and "p_holm" in pl


TINY, FIX = Path(__file__).parents[1] / "fixtures" / "tiny-llama", Path(__file__).parents[1] / "fixtures"


def _run(bench: str, model: str, out: Path, cache: Path, *flags: str) -> Path:
    data = FIX / f"{bench}_tiny"
    assert cli.main(["run", bench, "--model", str(TINY / model), "--data", str(data), *flags, "--quiet",
                     "--out", str(out), "--cache-dir", str(cache)]) == 0
    return out


def _paired(a: Path, b: Path, out: Path) -> dict:
    assert cli.main(["compare", str(a), str(b), "--bootstrap-resamples", "300", "--seed", "3", "--out", str(out)]) == 0
    return {r["metric"]: r.get("paired") for r in json.loads(out.read_text())["metrics"]}


def test_retain_model_runs_compare_forget_quality_and_privleak_as_with_retain_logs(tmp_path, capsys):
    """Two --retain-model runs: compare tests forget quality and privleak item by item from the
    retain side each run wrote (TOFU_RETAIN_LOGS.json), exactly as from the retain model's own
    TOFU_EVAL.json given as retain logs."""
    c, fq = tmp_path / "c", ("--metrics", "forget_quality,privleak")
    a = _run("tofu", "target", tmp_path / "a", c, *fq, "--retain-model", str(TINY / "retain"))
    b = _run("tofu", "retain", tmp_path / "b", c, *fq, "--retain-model", str(TINY / "retain"))
    meta = json.loads((a / "run.json").read_text())
    assert meta["retain_logs_written"] == {"TOFU": "TOFU_RETAIN_LOGS.json"}
    written = json.loads((a / "TOFU_RETAIN_LOGS.json").read_text())
    assert sorted(written) == ["forget_truth_ratio", "mia_min_k"] and len(written["forget_truth_ratio"]["value_by_index"]) == 40
    capsys.readouterr()
    got = _paired(a, b, tmp_path / "got.json")
    printed = [x for x in capsys.readouterr().out.splitlines() if x.startswith("TOFU/forget_quality ") and "[" in x]
    assert len(printed) == 1 and printed[0].endswith("(on the KS statistic)")

    # by hand: the retain model evaluated alone, its TOFU_EVAL.json as open-unlearning's retain logs
    r = _run("tofu", "retain", tmp_path / "r", c, "--metrics", "forget_truth_ratio,mia_min_k")
    logs = tmp_path / "retain_TOFU_EVAL.json"
    full = json.loads((r / "TOFU_EVAL.json").read_text())
    logs.write_text(json.dumps({k: full[k] for k in ("forget_truth_ratio", "mia_min_k")}))
    hand = []
    for run in (a, b):
        d = tmp_path / f"logs-{run.name}"
        d.mkdir()
        for f in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):
            shutil.copy(run / f, d / f)
        res = {"model": {"path": run.name}, "tofu_retain_logs": {"source": str(logs)}}
        (d / "run.json").write_text(json.dumps({"benchmarks": ["tofu"], "provenance": {"resources": res}}))
        hand.append(d)
    want = _paired(*hand, tmp_path / "want.json")
    for name in ("forget_quality", "privleak"):
        g, w = got[name], want[name]
        assert g is not None and w is not None, name
        assert g["delta"] == pytest.approx(w["delta"], rel=1e-6, abs=1e-9)
        assert g["percentile"] == pytest.approx(w["percentile"], rel=1e-6, abs=1e-9)
        assert g["p_value"] == pytest.approx(w["p_value"]) and g["verdict"] == w["verdict"]
    assert got["forget_quality"]["statistic"] == "ks" and got["forget_quality"]["p_value"] is not None
    # --pool: each seed's run reads its own retain side, copied with it
    pools = {}
    for run in (a, b):
        pools[run.name] = tmp_path / f"pool-{run.name}"
        for i in range(2):
            (pools[run.name] / f"seed-{i}").mkdir(parents=True)
            for f in ("TOFU_EVAL.json", "TOFU_SUMMARY.json", "TOFU_RETAIN_LOGS.json", "run.json"):
                shutil.copy(run / f, pools[run.name] / f"seed-{i}" / f)
    assert cli.main(["compare", str(pools["a"]), str(pools["b"]), "--pool", "--bootstrap-resamples", "50",
                     "--out", str(tmp_path / "pool.json")]) == 0
    pooled = {r["metric"]: r.get("paired") for r in json.loads((tmp_path / "pool.json").read_text())["metrics"]}
    assert pooled["forget_quality"]["statistic"] == "ks" and pooled["forget_quality"]["delta"] == pytest.approx(got["forget_quality"]["delta"])
    assert pooled["privleak"]["percentile"] is not None


def test_muse_retain_model_run_writes_the_retain_auc_for_privleak(tmp_path):
    c = tmp_path / "c"
    runs = [_run("muse", m, tmp_path / m, c, "--metrics", "privleak", "--retain-model", str(TINY / "retain"))
            for m in ("target", "retain")]
    written = json.loads((runs[0] / "MUSE_RETAIN_LOGS.json").read_text())
    assert list(written) == ["mia_min_k"] and 0.0 <= written["mia_min_k"]["auc"] <= 1.0
    # privleak is read back from the retain side: its number from the retain AUC the file holds
    s = 1 - json.loads((runs[0] / "MUSE_EVAL.json").read_text())["mia_min_k"]["auc"]
    r = 1 - written["mia_min_k"]["auc"]
    assert json.loads((runs[0] / "MUSE_SUMMARY.json").read_text())["privleak"] == pytest.approx((s - r) / (r + 1e-10) * 100)
    pl = _paired(*runs, tmp_path / "d.json")["privleak"]
    assert pl is not None and pl["percentile"] is not None and pl["n_items"]


def test_the_retain_file_run_json_names_is_read_only_beside_it(tmp_path):
    """run.json is untrusted input: ``retain_logs_written`` names a file of the run's own folder,
    never a path elsewhere."""
    from evaldag.engine.paired_report import retain_logs_of

    (tmp_path / "run").mkdir()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"forget_truth_ratio": {"agg_value": 1.0}}))
    (tmp_path / "run" / "TOFU_RETAIN_LOGS.json").write_text(json.dumps({"forget_truth_ratio": {"agg_value": 2.0}}))
    ok = {"retain_logs_written": {"TOFU": "TOFU_RETAIN_LOGS.json"}}
    assert retain_logs_of(ok, "tofu", tmp_path / "run") == {"forget_truth_ratio": {"agg_value": 2.0}}
    assert retain_logs_of(ok, "tofu") is None  # no folder: nothing to read beside
    for bad in ("../elsewhere.json", str(tmp_path / "elsewhere.json")):
        assert retain_logs_of({"retain_logs_written": {"TOFU": bad}}, "TOFU", tmp_path / "run") is None
