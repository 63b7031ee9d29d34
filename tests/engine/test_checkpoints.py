"""Checkpoints ordered by training step (trainer_state.json, checkpoint-N names, --step-of), and
--select's bad input on the command line: one line, exit 2, before any model loads."""

import json

import pytest

from evaldag.engine import cli
from evaldag.engine.checkpoints import flat, order, parse_step_of


def test_steps_come_from_step_of_then_trainer_state_then_the_name_and_the_stepless_go_last(tmp_path):
    for name in ("run/checkpoint-100", "run/checkpoint-20", "final", "best", "odd"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "run" / "checkpoint-100" / "trainer_state.json").write_text(json.dumps({"global_step": 7}))
    models = [str(tmp_path / n) for n in ("run/checkpoint-100", "final", "run/checkpoint-20", "odd", "best")]
    notes = []
    cps = order(models, ["checkpoint-100", "final", "checkpoint-20", "odd", "best"], ["final=50"], notes.append)
    assert [(c.name, c.step, c.step_from) for c in cps] == [
        ("checkpoint-100", 7, "trainer_state.json"), ("checkpoint-20", 20, "name"), ("final", 50, "--step-of"),
        ("best", None, None), ("odd", None, None)]
    assert notes == ["no training step for odd, best (no trainer_state.json, no checkpoint-N name, no --step-of "
                     "NAME=N): ordered by name after the others"]
    # none with a step: models, not one run's checkpoints, keep the order given, nothing said
    assert [c.name for c in order([str(tmp_path / "odd"), str(tmp_path / "best")], ["odd", "best"], [], notes.append)] \
        == ["odd", "best"] and len(notes) == 1


def test_bad_step_of_values_are_one_line():
    assert parse_step_of(["a=1", "x/y=20"]) == {"a": 1, "x/y": 20}
    with pytest.raises(ValueError, match=r"--step-of 'a=b': expected NAME=STEP"):
        parse_step_of(["a=b"])
    with pytest.raises(ValueError, match=r"no checkpoint of this sweep is named 'nope'"):
        order(["m/a", "m/b"], ["a", "b"], ["nope=3"])


def test_flat_reads_one_checkpoint_from_the_comparison_table():
    table = {"TOFU": {"a": {"x": 0.5, "y": None}}, "MUSE": {"a": {"x": 9.0}, "b": {"x": 1.0}}}
    assert flat(table, "x") == {"a": 0.5, "b": 1.0} and flat(table, "y") == {"a": None, "b": None}


def test_a_select_rule_naming_an_unknown_metric_fails_before_anything_runs(tmp_path, capsys):
    from pathlib import Path

    fix = Path(__file__).parents[1] / "fixtures"
    code = cli.main(["run", "tofu", "--data", str(fix / "tofu_tiny"), "--metrics", "forget_Q_A_Prob,forget_quality",
                     "--model", str(fix / "tiny-llama" / "target"), "--model", str(fix / "tiny-llama" / "retain"),
                     "--select", "max forget_qualty where forget_Q_A_Prob > 0", "--out", str(tmp_path / "o"),
                     "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["evaldag: error: --select 'max forget_qualty where forget_Q_A_Prob > 0': no checkpoint "
                                 "has a metric 'forget_qualty'; did you mean forget_quality?"]
    assert not (tmp_path / "o").exists() and not (tmp_path / "c").exists()


def test_report_over_several_run_folders_orders_them_by_step(tmp_path, capsys):
    from evaldag.engine.checkpoints import order_runs

    runs = []
    for name, model in (("c", "/ck/checkpoint-300"), ("a", "/ck/checkpoint-1000"), ("b", "/ck/other"), ("d", "/ck/step-5")):
        d = tmp_path / name
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"provenance": {"resources": {"model": {"path": model}}}}))
        runs.append((name, d))
    notes = []
    assert [n for n, _ in order_runs(runs, notes.append)] == ["d", "c", "a", "b"]
    assert notes == ["no training step for b: ordered by name after the others"]
