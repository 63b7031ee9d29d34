"""EvaldagCallback: a tiny Trainer run on CPU evaluated at 3 steps, the numbers equal to CLI runs
on the saved checkpoints (which then find everything cached), a 2-rank DDP run, bad input."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from evaldag.engine import cli  # noqa: E402
from evaldag.engine.adapters.hf import HFModel  # noqa: E402
from evaldag.engine.cache import Cache, aliases  # noqa: E402
from evaldag.engine.integrations import EvaldagCallback  # noqa: E402

from .. import ranks  # noqa: E402
from ..servers import free_port  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from tiny_trainer import OPTIONS, TINY, TOFU, make_trainer  # noqa: E402

ARGS = ["run", "tofu", "--data", str(TOFU), "--retain-model", str(TINY / "retain"),
        "--metrics", "forget_Q_A_Prob,forget_quality", "--max-new-tokens", "8", "--quiet"]
STEPS = (8, 16, 24)


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """24 steps of gradient ascent, saved and evaluated every 8 steps (3 evaluations)."""
    root = tmp_path_factory.mktemp("train")
    trainer = make_trainer(root / "out", steps=24, save_steps=8)
    cb = EvaldagCallback.for_trainer(trainer, "tofu", on_save=True, cache_dir=str(root / "cache"),
                                     select="min forget_Q_A_Prob where forget_quality >= 0", **OPTIONS)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    return root, trainer, cb, seconds


def test_the_callback_evaluates_at_each_save_and_logs_through_the_trainer(trained):
    root, trainer, cb, seconds = trained
    evald = root / "out" / "evaldag"
    assert [h["step"] for h in cb.history] == list(STEPS) and all(h["exit"] == 0 for h in cb.history)
    sums = [_json(evald / f"step-{s}" / "TOFU_SUMMARY.json") for s in STEPS]
    assert all(set(s) == {"forget_Q_A_Prob", "forget_quality"} for s in sums)
    probs = [s["forget_Q_A_Prob"] for s in sums]
    assert probs[0] > probs[1] > probs[2] > 0  # gradient ascent pushes the forget set's probability down
    logged = {e["step"]: e for e in trainer.state.log_history if "evaldag/forget_Q_A_Prob" in e}
    assert sorted(logged) == list(STEPS)  # what TensorBoard / W&B would receive, at the trainer's steps
    for step, s in zip(STEPS, sums):
        assert logged[step]["evaldag/forget_Q_A_Prob"] == s["forget_Q_A_Prob"]
        assert logged[step]["evaldag/forget_quality"] == s["forget_quality"]
    # the retain model is forwarded once for the whole training run
    first, later = (_json(evald / f"step-{s}" / "run.json")["executor"] for s in (8, 16))
    retain = HFModel(str(TINY / "retain")).fingerprint()
    assert retain in first["forwarded_by_model"] and retain not in later["forwarded_by_model"]
    assert retain in first["models_loaded"] and retain not in later["models_loaded"]
    assert trainer.model.training  # handed back in training mode
    # the steps as one sweep: step order, the comparison table, the choice of select=
    sweep = _json(evald / "sweep.json")
    assert [(r["name"], r["step"]) for r in sweep["checkpoints"]] == [(f"step-{s}", s) for s in STEPS]
    assert sweep["table"]["TOFU"]["forget_Q_A_Prob"] == {f"step-{s}": p for s, p in zip(STEPS, probs)}
    assert sweep["selected"]["checkpoints"] == ["step-24"] and cb.selected == sweep["selected"]
    assert [logged[s].get("evaldag/selected_step") for s in STEPS] == [8, 16, 24]
    page = root / "steps.html"  # `evaldag report OUTPUT_DIR/evaldag` reads the steps as a sweep's checkpoints
    assert cli.main(["report", str(evald), "--out", str(page)]) == 0
    assert all(f"step-{s}" in page.read_text() for s in STEPS)


def test_cli_runs_on_the_saved_checkpoints_give_the_same_numbers_and_find_them_cached(trained, tmp_path):
    root, _, _, _ = trained
    ckpts = [root / "out" / f"checkpoint-{s}" for s in STEPS]
    models = [a for c in reversed(ckpts) for a in ("--model", str(c))]  # given last step first
    # warm: the callback's cache, through the aliases recorded at each save
    rule = "min forget_Q_A_Prob where forget_quality >= 0"
    assert cli.main([*ARGS, *models, "--out", str(tmp_path / "warm"), "--cache-dir", str(root / "cache"),
                     "--select", rule]) == 0
    sweep = _json(tmp_path / "warm" / "sweep.json")
    assert [(r["name"], r["step"], r["step_from"]) for r in sweep["checkpoints"]] == \
        [(f"checkpoint-{s}", s, "trainer_state.json") for s in STEPS]
    probs = sweep["table"]["TOFU"]["forget_Q_A_Prob"]
    assert sweep["selected"]["checkpoints"] == [min(probs, key=probs.get)] == ["checkpoint-24"]
    assert sweep["selected"]["rule"] == rule and sweep["selected"]["why"].startswith("checkpoint-24: the lowest forget_Q_A_Prob")
    # cold: a fresh cache, every number of the last checkpoint computed again from the saved files
    assert cli.main([*ARGS, "--model", str(ckpts[-1]), "--out", str(tmp_path / "cold"), "--cache-dir", str(tmp_path / "c2")]) == 0
    for name in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):
        assert (tmp_path / "cold" / name).read_bytes() == (root / "out" / "evaldag" / "step-24" / name).read_bytes()
    for step, ckpt in zip(STEPS, ckpts):
        mine = root / "out" / "evaldag" / f"step-{step}"
        for name in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):
            assert (tmp_path / "warm" / ckpt.name / name).read_bytes() == (mine / name).read_bytes()
        run = _json(tmp_path / "warm" / ckpt.name / "run.json")
        assert run["executor"]["models_loaded"] == [] and run["executor"]["forwarded_by_model"] == {}
        assert {n["status"] for n in run["nodes"].values()} == {"cached"}


def test_an_alias_is_recorded_only_for_the_weights_evaluated(trained, tmp_path):
    root, trainer, cb, _ = trained
    cache = Cache(str(root / "cache"))
    with cache.filehash.active():  # the folder's fingerprint resolves to the in-memory one
        fp = HFModel(str(root / "out" / "checkpoint-24")).fingerprint()
    assert fp == cb._last[1]
    raw = HFModel(str(root / "out" / "checkpoint-24")).fingerprint()  # outside a cache: the file scheme
    assert raw != fp and aliases.lookup(cache.root, raw) == fp
    # a damaged record is ignored (a recomputation, never a wrong hit)
    rec = cache.root / "aliases" / f"{raw}.json"
    data = _json(rec)
    rec.write_text(json.dumps({**data, "memory": "0" * 64}))
    with pytest.warns(UserWarning, match="damaged"):
        assert aliases.lookup(cache.root, raw) is None
    rec.write_text(json.dumps(data))
    # `cache clear` removes the aliases with the other entries it wrote (nothing left behind)
    import shutil

    from evaldag.engine.cache.safety import clear_entries

    copy = tmp_path / "cache-copy"
    shutil.copytree(cache.root, copy)
    removed, left = clear_entries(copy)
    assert removed > 3 and left == [] and not copy.exists()
    # a checkpoint whose tensors differ from the model in memory gets no alias

    other = tmp_path / "checkpoint-8"
    shutil.copytree(root / "out" / "checkpoint-8", other)
    with pytest.warns(UserWarning, match="not recorded"):
        assert cb.alias_checkpoint(other, trainer.model, cb._last[1]) is False


def test_stop_when_ends_training_at_the_first_step_that_meets_it(tmp_path):
    trainer = make_trainer(tmp_path / "out", steps=6)
    cb = EvaldagCallback.for_trainer(trainer, "tofu", every_n_steps=2, data=str(TOFU), metrics=["forget_Q_A_Prob"],
                                     max_new_tokens=8, cache_dir=str(tmp_path / "c"), stop_when="forget_Q_A_Prob < 1")
    trainer.train()
    assert trainer.state.global_step == 2 and [h["step"] for h in cb.history] == [2] and cb.history[0]["stopped"]
    with pytest.raises(ValueError, match=r"^EvaldagCallback: stop_when='forget_Q_A_Prob => 1': expected NAME OP NUMBER"):
        EvaldagCallback("tofu", on_save=True, stop_when="forget_Q_A_Prob => 1")
    with pytest.raises(ValueError, match=r"^EvaldagCallback: select='max forget_qualty': no checkpoint has a metric "
                                         r"'forget_qualty'; did you mean forget_quality\?"):
        EvaldagCallback("tofu", on_save=True, select="max forget_qualty", metrics=["forget_quality"])


def test_bad_options_fail_before_training_with_one_line(tmp_path):
    trainer = make_trainer(tmp_path / "out", steps=2)
    with pytest.raises(ValueError, match=r"^EvaldagCallback: unrecognized arguments: --retain-modle"):
        EvaldagCallback.for_trainer(trainer, "tofu", on_save=True, retain_modle="x", data=str(TOFU))
    with pytest.raises(ValueError, match=r"unknown benchmark 'tof'; did you mean tofu"):
        EvaldagCallback("tof", on_save=True)
    with pytest.raises(ValueError, match=r"metric.*forget_Q_A_Porb.*forget_Q_A_Prob"):
        EvaldagCallback.for_trainer(trainer, "tofu", on_save=True, metrics=["forget_Q_A_Porb"], data=str(TOFU),
                                    cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="model= is not an option here"):
        EvaldagCallback("tofu", on_save=True, model="x")
    with pytest.raises(ValueError, match="say when to evaluate"):
        EvaldagCallback("tofu")
    trainer.processing_class = None
    trainer.model.name_or_path = str(tmp_path)  # a folder without a tokenizer
    with pytest.raises(ValueError, match=r"^EvaldagCallback: cannot find the model's tokenizer"):
        EvaldagCallback.for_trainer(trainer, "tofu", on_save=True, data=str(TOFU))


def test_two_gloo_ranks_share_the_evaluation_and_keep_the_job_group(tmp_path):
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "OMP_NUM_THREADS": "1", "EVALDAG_DIST_TIMEOUT": "120"}
    argv = [sys.executable, str(Path(__file__).parents[1] / "tiny_trainer.py"), str(tmp_path / "out"), "2", "1",
            str(tmp_path / "cache")]
    done = ranks.ranks([argv, argv], env, tmp_path / "logs", limit_s=240)
    assert [d.code for d in done] == [0, 0], ranks.tails(done)
    lines = [json.loads(d.out.strip().splitlines()[-1]) for d in done]
    assert [x["sum"] for x in lines] == [2.0, 2.0]  # the job's group is still up after the evaluations
    assert lines[0]["steps"] == lines[1]["steps"] == [1, 2]
    assert lines[0]["summary"] == lines[1]["summary"] and lines[0]["summary"][0]["forget_Q_A_Prob"] > 0
    run = _json(tmp_path / "out" / "evaldag" / "step-1" / "run.json")
    assert run["executor"]["world_size"] == 2
    assert all(r["batches"] > 0 for r in run["executor"]["by_rank"].values())  # each rank forwarded a share
