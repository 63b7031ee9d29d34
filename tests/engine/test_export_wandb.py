"""``evaldag export DIR --wandb PROJECT`` in W&B's offline mode: each checkpoint logged at its step.

wandb is optional (evaldag[wandb]): skipped locally when missing, a failure under CI=true
(.ci/run installs the extra)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaldag.engine.export_wandb import by_step


def _sweep(root: Path) -> Path:
    """A sweep's OUT as a run writes it: two checkpoint folders and sweep.json with their steps."""
    for name, step, fq in (("checkpoint-20", 20, 0.25), ("final", 30, 0.5)):
        d = root / name
        d.mkdir(parents=True)
        (d / "TOFU_SUMMARY.json").write_text(json.dumps({"forget_quality": fq, "model_utility": 0.125}))
        (d / "run.json").write_text(json.dumps({"benchmarks": ["tofu"], "provenance": {
            "resources": {"model": {"path": f"/ckpt/{name}"}}}}))
    (root / "sweep.json").write_text(json.dumps({"checkpoints": [
        {"name": "checkpoint-20", "model": "/ckpt/checkpoint-20", "step": 20},
        {"name": "final", "model": "/ckpt/final", "step": 30}]}))
    return root


def test_the_csv_has_the_step_and_wandb_history_is_in_step_order(tmp_path):
    out = subprocess.run([sys.executable, "-m", "evaldag.engine.cli", "export", str(_sweep(tmp_path / "s")), "--csv"],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[:2] == ["run,model,benchmark,metric,split,value,step",
                                    "checkpoint-20,/ckpt/checkpoint-20,TOFU,forget_quality,forget,0.25,20"]
    table = [{"run": "b", "benchmark": "T", "metric": "m", "value": 2.0, "step": None},
             {"run": "a", "benchmark": "T", "metric": "m", "value": 1.0, "step": 5}]
    assert by_step(table) == ([(5, {"T/m": 1.0})], ["b"])
    table[0]["step"] = table[1]["step"] = None
    assert by_step(table) == ([(0, {"T/m": 2.0}), (1, {"T/m": 1.0})], [])


def test_export_wandb_offline_logs_each_checkpoint_at_its_step(tmp_path):
    try:
        import wandb  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("wandb missing in CI (.ci/run installs evaldag[wandb])", pytrace=False)
        pytest.skip("wandb not installed (pip install 'evaldag[wandb]')")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-m", "evaldag.engine.cli", "export", str(_sweep(tmp_path / "s")),
                           "--wandb", "evaldag-test"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "evaldag: 4 rows -> W&B project evaldag-test, logged at steps 20, 30 (" in done.stderr
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    assert (run_dir / f"run-{run_dir.name.rsplit('-', 1)[1]}.wandb").stat().st_size > 0  # the offline run's records
    (table_file,) = (run_dir / "files" / "media" / "table").glob("evaldag/table_30_*.table.json")  # after step 30
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["run", "model", "benchmark", "metric", "split", "value", "step"]
    assert ["checkpoint-20", "/ckpt/checkpoint-20", "TOFU", "forget_quality", "forget", 0.25, 20] in table["data"]
