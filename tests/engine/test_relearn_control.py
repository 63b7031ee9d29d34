"""One ``--attack`` run with a retain model writes the retain model's own runs too (``OUT/control/``,
its relearned run under ``OUT/control/attacks/<attack>/``), R computed from them with no other command.

On the tiny fixtures, 8 forget rows: one optimizer step per relearn. Every run is ``--deterministic`` (each
request forwarded alone): the control asks fewer requests than a run of the retain model alone (the rest
are cached), so batched runs would differ in float rounding by their batches, not by their model."""

from __future__ import annotations

import json
from pathlib import Path

from evaldag.engine import relearn, relearn_transform
from tests.conftest_models import register_mlp_scale
from tests.inprocess import run_cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TARGET, RETAIN, DATA = FIX / "tiny-llama" / "target", FIX / "tiny-llama" / "retain", FIX / "tofu_tiny"
METRICS = "forget_Q_A_Prob,forget_truth_ratio,forget_quality"


register_mlp_scale("quantize-scale-control-test")  # scored by Q: a quantizer's stand-in, model role only


RELEARN, QUANT = "relearn:lr=1e-3", "quantize-scale-control-test:0.5"
RELEARN_DIR = "relearn_lr=1e-3"


def _run(tmp, model, out, cache, *extra):
    return run_cli(["run", "tofu", "--model", model, "--retain-model", RETAIN, "--data", DATA, "--limit", "8",
                    "--metrics", METRICS, "--cache-dir", tmp / cache, "--out", tmp / out, "--no-progress", "--deterministic", *extra])


def _json(path: Path):
    return json.loads(path.read_text())


def _R(data: dict) -> dict:
    return {k: row["R"] for k, row in data["attacks"][RELEARN_DIR]["metrics"].items()}


def test_one_attack_run_writes_the_retain_models_runs_and_scores_R(tmp_path):
    one = _run(tmp_path, TARGET, "out", "cache", "--attack", RELEARN, "--attack", QUANT)
    assert one.returncode == 0, one.stderr
    out, ctl = tmp_path / "out", tmp_path / "out" / "control"
    # the retain model's plain run and its relearned run; the quantization has no control (Q needs none)
    assert sorted(p.name for p in (ctl / "attacks").iterdir()) == [RELEARN_DIR]
    assert (ctl / "TOFU_EVAL.json").is_file() and (ctl / "attacks" / RELEARN_DIR / "TOFU_EVAL.json").is_file()

    # what the retain model computed as the unlearned run's reference (its 48 truth-ratio sequences) came
    # from the cache, node by node: the control asked only forget_Q_A_Prob's 8, which the reference never asked
    plain, cplain = _json(out / "run.json")["executor"], _json(ctl / "run.json")["executor"]
    ret_fp = _json(ctl / "run.json")["provenance"]["resources"]["model"]["fingerprint"]
    assert plain["forwarded_by_model"][ret_fp] == {"token_stats": 48}
    assert (cplain["requests"], cplain["sequences_forwarded"], cplain["forwarded_by_model"]) == (8, 8, {ret_fp: {"token_stats": 8}})
    # the same under the relearn: the relearned retain model served the attacked run as its reference
    att, catt = (_json(d / "attacks" / RELEARN_DIR / "run.json")["executor"] for d in (out, ctl))
    dret = _json(ctl / "attacks" / RELEARN_DIR / "run.json")["provenance"]["resources"]["model"]["fingerprint"]
    assert att["forwarded_by_model"][dret] == {"token_stats": 48} and (catt["requests"], catt["sequences_forwarded"]) == (8, 8)

    # ROBUSTNESS.json: R from the control, HM beside the quantization
    rob = _json(out / "ROBUSTNESS.json")
    assert rob["retain_before"] == str(ctl.resolve()) or Path(rob["retain_before"]).resolve() == ctl.resolve()
    r = rob["attacks"][RELEARN_DIR]
    assert [Path(p).resolve() for p in r["retain_folders"]] == [ctl.resolve(), (ctl / "attacks" / RELEARN_DIR).resolve()]
    row = r["metrics"]["TOFU/forget_Q_A_Prob"]
    csum, casum = _json(ctl / "TOFU_SUMMARY.json"), _json(ctl / "attacks" / RELEARN_DIR / "TOFU_SUMMARY.json")
    assert (row["retain_before"], row["retain_after"]) == (csum["forget_Q_A_Prob"], casum["forget_Q_A_Prob"])
    assert "refused" not in row["R"] and row["R"]["raw"] is not None
    hm = {h["metric"]: h for h in rob["hm"]}["TOFU/forget_Q_A_Prob"]
    assert hm["R"] == row["R"]["value"] and "refused" not in hm["HM"]
    html = (out / "report.html").read_text()
    assert "<th class=\"ed-num\">retain before</th>" in html and f'title="{row["R"]["value"]!r}"' in html
    assert f'title="{row["retain_after"]!r}"' in html

    # the two-run workflow on the same inputs: the retain model as --model, in a cache of its own
    alone = _run(tmp_path, RETAIN, "out_r", "cache_r", "--attack", RELEARN)
    assert alone.returncode == 0, alone.stderr
    assert _json(tmp_path / "out_r" / "run.json")["executor"]["sequences_forwarded"] == 56  # 48 + 8 on its own
    for rel in ("TOFU_EVAL.json", f"attacks/{RELEARN_DIR}/TOFU_EVAL.json"):
        assert _json(ctl / rel) == _json(tmp_path / "out_r" / rel), rel
    # ... and the unlearned model's run without the control, scored with --retain OUT_R afterwards
    bare = _run(tmp_path, TARGET, "out2", "cache", "--attack", RELEARN, "--attack", QUANT, "--no-control")
    assert bare.returncode == 0, bare.stderr
    assert not (tmp_path / "out2" / "control").exists()
    assert all("refused" in s for s in _R(_json(tmp_path / "out2" / "ROBUSTNESS.json")).values())
    two = run_cli(["robustness", tmp_path / "out2", "--retain", tmp_path / "out_r", "--to", tmp_path / "two.json"])
    assert two.returncode == 0, two.stderr
    assert _R(_json(tmp_path / "two.json")) == _R(rob)
    # `evaldag robustness OUT` alone finds OUT/control: the same R
    again = run_cli(["robustness", out, "--to", tmp_path / "again.json"])
    assert again.returncode == 0, again.stderr
    assert _R(_json(tmp_path / "again.json")) == _R(rob)


def test_a_warm_rerun_trains_loads_and_forwards_nothing(tmp_path):
    assert _run(tmp_path, TARGET, "out", "cache", "--attack", RELEARN).returncode == 0
    trained, stored = len(relearn.TRAINER_RUNS), len(relearn_transform.STORED_LOADS)
    warm = _run(tmp_path, TARGET, "out", "cache", "--attack", RELEARN)
    assert warm.returncode == 0, warm.stderr
    assert (len(relearn.TRAINER_RUNS), len(relearn_transform.STORED_LOADS)) == (trained, stored)
    out = tmp_path / "out"
    for d in (out, out / "attacks" / RELEARN_DIR, out / "control", out / "control" / "attacks" / RELEARN_DIR):
        ex = _json(d / "run.json")["executor"]
        assert (ex["sequences_forwarded"], ex["model_loaded"]) == (0, False), d


def test_a_failing_control_is_refused_before_the_plain_run(tmp_path):
    """OUT/control a file: one line naming it, and nothing run (no OUT/run.json)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "control").write_text("mine")
    proc = _run(tmp_path, TARGET, "out", "cache", "--attack", RELEARN)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "control" in proc.stderr and proc.stderr.startswith("evaldag: error:")
    assert not (tmp_path / "out" / "run.json").exists() and (tmp_path / "out" / "control").read_text() == "mine"


def test_plan_only_plans_the_control_and_writes_nothing(tmp_path):
    proc = _run(tmp_path, TARGET, "out", "cache", "--attack", RELEARN, "--plan-only")
    assert proc.returncode == 0, proc.stderr
    # the plain run, the control, the relearned model, the relearned control: four plans, the control's on the retain model
    assert proc.stdout.count("plan: model work on model (") == 4
    assert proc.stdout.count(f"plan: model work on model ({RETAIN})") == 2
    assert "warning" not in proc.stderr and not (tmp_path / "out").exists()


def test_robustness_refuses_a_stale_attack_folder_a_wrong_control_and_a_control_relearned_otherwise(tmp_path):
    """What an attacked folder's run.json records (the derived model's parent, the recipe, the data) must
    match the runs it is scored against: a folder left by a run on another model is not scored."""
    assert _run(tmp_path, TARGET, "unl", "c", "--attack", QUANT, "--attack", RELEARN, "--no-control").returncode == 0
    assert _run(tmp_path, RETAIN, "ret", "c", "--attack", QUANT, "--attack", "relearn:lr=2e-3", "--no-control").returncode == 0
    (qdir,) = [p.name for p in (tmp_path / "unl" / "attacks").iterdir() if p.name.startswith("quantize")]
    ok = run_cli(["robustness", tmp_path / "unl"])
    assert ok.returncode == 0, ok.stderr
    stale = run_cli(["robustness", tmp_path / "unl", "--attacked", f"{qdir}={tmp_path / 'ret' / 'attacks' / qdir}"])
    assert stale.returncode == 2
    assert stale.stderr.startswith(f"evaldag: error: {tmp_path / 'ret' / 'attacks' / qdir}: derived from model "), stale.stderr
    assert "not from " + str(tmp_path / "unl") in stale.stderr and "a folder left by an earlier run?" in stale.stderr
    wrong = run_cli(["robustness", tmp_path / "unl", "--retain", tmp_path / "unl"])  # the unlearned run as its own control
    assert wrong.returncode == 2 and f"is not {tmp_path / 'unl'}'s retain model" in wrong.stderr, wrong.stderr
    other = run_cli(["robustness", tmp_path / "unl", "--retain", tmp_path / "ret",
                     "--retain-attacked", f"{RELEARN_DIR}={tmp_path / 'ret' / 'attacks' / 'relearn_lr=2e-3'}"])
    assert other.returncode == 2, other.stderr
    assert "the retain model was attacked by 'relearn:" in other.stderr and "lr=0.002" in other.stderr
    assert "R's control must be relearned by the same recipe on the same rows" in other.stderr
