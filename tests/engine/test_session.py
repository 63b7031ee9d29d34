"""The library driver from Python, no command line: a sweep with a select rule, one shard of a
sweep, and the Trainer callback's evaluation (`session.py`, `session_sweep.py`, `options.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from evaldag.engine.registry import BENCHMARKS
from evaldag.engine.session import Event, RunOptions, run_benchmarks
from evaldag.engine.session_sweep import SweepOptions, run_sweep
from tests.conftest_models import nudged_checkpoint

FIX = Path(__file__).parents[1] / "fixtures"
TINY = FIX / "tiny-llama"
METRICS = ("forget_Q_A_Prob",)


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("session")
    tofu = BENCHMARKS.get("tofu")
    cfg = tofu.Config(data=str(FIX / "tofu_tiny"), model=str(TINY / "target"), metrics=METRICS)
    models = (str(TINY / "target"), str(nudged_checkpoint(root / "nudged", 0.5)), str(nudged_checkpoint(root / "halved", 0.25)))
    return root, tofu, cfg, models


def test_a_sweep_with_select_through_the_python_api(sweep, capsys):
    root, tofu, cfg, models = sweep
    out, events = root / "sweep", []
    options = RunOptions(out=out, cache_dir=str(root / "cache"), quiet=True, events=events.append)
    code = run_sweep([tofu], [cfg], options, SweepOptions(models=models[:2], select="max forget_Q_A_Prob",
                                                          metric_names=METRICS))
    assert code == 0
    probs = {n: _json(out / n / "TOFU_SUMMARY.json")["forget_Q_A_Prob"] for n in ("target", "nudged")}
    assert probs["target"] != probs["nudged"]  # each checkpoint ran its own copy of the config
    record = _json(out / "sweep.json")
    assert [r["name"] for r in record["checkpoints"]] == ["target", "nudged"]
    assert record["selected"]["checkpoints"] == [max(probs, key=probs.get)]
    assert cfg.model == str(TINY / "target")  # the config given is not changed
    assert (out / "report.html").is_file() and not (out / "target" / "report.html").exists()
    runs = [_json(out / n / "run.json") for n in ("target", "nudged")]
    assert all(r["provenance"]["sweep"]["checkpoints"] == ["target", "nudged"] for r in runs)
    kinds = [e.kind for e in events]
    assert kinds == ["sweep"] + ["plan", "run", "written"] * 2 and all(isinstance(e, Event) for e in events)
    assert events[0].data["plan"].mode == "sequential" and events[0].data["plan"].order == list(models[:2])
    # a select rule naming a metric the run does not compute is refused before anything runs
    bad = run_sweep([tofu], [cfg], RunOptions(out=root / "bad", cache_dir=str(root / "cache"), quiet=True),
                    SweepOptions(models=models[:2], select="max forget_QA_Prob", metric_names=METRICS))
    assert bad == 2 and not (root / "bad").exists()
    # a bare pareto reads TOFU's trade-off (Benchmark.tradeoff): forget quality, which this run does not compute
    bare = run_sweep([tofu], [cfg], RunOptions(out=root / "bare", cache_dir=str(root / "cache"), quiet=True),
                     SweepOptions(models=models[:2], select="pareto", metric_names=METRICS))
    assert bare == 2 and "no checkpoint has a metric 'forget_quality'" in capsys.readouterr().err


def test_one_shard_of_a_sweep_through_the_python_api(sweep, capsys):
    root, tofu, cfg, models = sweep
    out = root / "shard"
    options = RunOptions(out=out, cache_dir=str(root / "cache"), quiet=True)
    assert run_sweep([tofu], [cfg], options, SweepOptions(models=models, shard=(1, 2))) == 0
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["nudged", "report.html", "sweep.json"]
    whole = _json(root / "sweep" / "nudged" / "TOFU_SUMMARY.json")  # the same checkpoint in the whole sweep
    assert _json(out / "nudged" / "TOFU_SUMMARY.json") == whole
    assert _json(out / "nudged" / "run.json")["provenance"]["sweep"]["checkpoints"] == ["nudged"]
    # a shard past the checkpoints has nothing to do; a shard without checkpoints is refused
    assert run_sweep([tofu], [cfg], options, SweepOptions(models=models[:1], shard=(1, 2))) == 0
    assert run_sweep([tofu], [cfg], options, SweepOptions(shard=(0, 2))) == 2
    assert "--shard needs the checkpoints" in capsys.readouterr().err


def test_the_callbacks_evaluation_is_the_librarys_run_on_the_in_memory_model(sweep, tmp_path):
    """The callback's step evaluation, driven from Python on an in-memory model, gives the numbers
    `run_benchmarks` gives on the folder those weights came from."""
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaldag.engine.integrations import EvaldagCallback

    root, tofu, cfg, _ = sweep
    model = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(TINY / "target"))
    cb = EvaldagCallback("tofu", every_n_steps=1, tokenizer=tok, output_dir=str(tmp_path), data=str(FIX / "tofu_tiny"),
                         metrics=list(METRICS), cache_dir=str(root / "cache"))
    cb._prepare(SimpleNamespace(output_dir=str(tmp_path)), model)
    numbers = cb.evaluate(model, 3)
    folder = run_benchmarks([tofu], [cfg], RunOptions(out=tmp_path / "folder", cache_dir=str(root / "cache"), quiet=True))
    assert folder.code == 0 and folder.result is not None
    assert numbers == {"forget_Q_A_Prob": _json(tmp_path / "folder" / "TOFU_SUMMARY.json")["forget_Q_A_Prob"]}
    step = tmp_path / "evaldag" / "step-3"
    command = _json(step / "run.json")["provenance"]["command"]
    assert command[-2:] == ["--model", "<in memory, step 3>"]


def test_a_run_from_python_leaves_no_open_database_in_the_cache(sweep, tmp_path):
    """The request index is an SQLite database in WAL mode: a run that kept its connection would
    leave ``-wal``/``-shm`` files (and a read-only reader behind it) until the process ends."""
    _, tofu, cfg, _ = sweep
    cache = tmp_path / "cache"
    outcome = run_benchmarks([tofu], [cfg], RunOptions(out=str(tmp_path / "out"), cache_dir=str(cache), quiet=True))
    assert outcome.code == 0
    databases = sorted(p.name for p in cache.rglob("*.sqlite*"))
    assert databases and all(name.endswith(".sqlite") for name in databases), databases
    # and the store opens again on the next use: a second run reads every request from it
    again = run_benchmarks([tofu], [cfg], RunOptions(out=str(tmp_path / "out2"), cache_dir=str(cache), quiet=True))
    assert again.code == 0 and again.result.count("cached") == len(again.result.records)
