"""A sweep of checkpoints in one command: one run each, the retain model forwarded once, one report."""

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from evaldag.engine import cli
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.cli.sweep import expand_models, folder_names

FIX = Path(__file__).parents[1] / "fixtures"
TINY = FIX / "tiny-llama"
ARGS = ["run", "tofu", "--data", str(FIX / "tofu_tiny"), "--retain-model", str(TINY / "retain"),
        "--metrics", "forget_Q_A_Prob,forget_quality", "--max-new-tokens", "8", "--quiet"]


def _perturbed_copy(dest: Path) -> Path:
    """The target checkpoint with one weight nudged: another model, another fingerprint."""
    shutil.copytree(TINY / "target", dest)
    weights = load_file(str(dest / "model.safetensors"))
    name = sorted(k for k in weights if k.endswith("mlp.down_proj.weight"))[0]
    weights[name] = (weights[name] * np.float32(1.01)).astype(weights[name].dtype)
    save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def _executor(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())["executor"]


def test_model_arguments_expand_globs_and_files(tmp_path):
    for name in ("step-2", "step-10", "final"):
        (tmp_path / "ckpts" / name).mkdir(parents=True)
    (tmp_path / "list.txt").write_text(f"# checkpoints\n{tmp_path / 'ckpts' / 'final'}\n\n")
    got = expand_models([str(tmp_path / "ckpts" / "step-*"), f"@{tmp_path / 'list.txt'}", str(tmp_path / "ckpts" / "final")])
    assert got == [str(tmp_path / "ckpts" / n) for n in ("step-2", "step-10", "final")]
    assert folder_names(["a/run1/final", "b/run2/final", "c/x"]) == ["run1-final", "run2-final", "c-x"]


def test_a_sweep_runs_each_checkpoint_forwards_the_retain_model_once_and_writes_one_report(tmp_path):
    other = _perturbed_copy(tmp_path / "nudged")
    out, cache = tmp_path / "sweep", tmp_path / "cache"
    assert cli.main([*ARGS, "--model", str(TINY / "target"), "--model", str(other), "--out", str(out),
                     "--cache-dir", str(cache)]) == 0
    fp = {name: HFModel(str(path)).fingerprint() for name, path in
          (("target", TINY / "target"), ("retain", TINY / "retain"), ("nudged", other))}
    first, second = _executor(out / "target"), _executor(out / "nudged")
    assert sorted(first["models_loaded"]) == sorted([fp["target"], fp["retain"]])
    assert set(first["forwarded_by_model"]) == {fp["target"], fp["retain"]}
    # the retain side comes from the cache: the retain model is neither loaded nor forwarded again
    assert second["models_loaded"] == [fp["nudged"]] and set(second["forwarded_by_model"]) == {fp["nudged"]}

    alone = tmp_path / "alone"  # the first checkpoint alone, on a fresh cache: the same numbers
    assert cli.main([*ARGS, "--model", str(TINY / "target"), "--out", str(alone), "--cache-dir", str(tmp_path / "c2")]) == 0
    for name in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):
        assert (out / "target" / name).read_bytes() == (alone / name).read_bytes()
    assert (out / "nudged" / "TOFU_EVAL.json").read_bytes() != (alone / "TOFU_EVAL.json").read_bytes()

    page = (out / "report.html").read_text()
    assert "target" in page and "nudged" in page
    assert not (out / "target" / "report.html").exists()  # one report for the sweep
