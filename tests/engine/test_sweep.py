"""A sweep of checkpoints in one command: one run each, the retain model forwarded once, one report."""

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from evaldag.engine import cli
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.sweep_plan import expand_models, folder_names

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


def test_the_cli_owns_model_and_hands_each_run_one_checkpoint(tmp_path, capsys):
    """`--model` has one owner: the run command declares it (repeatable) when a named benchmark
    `takes_model`; the config is read once with the first checkpoint in `model`, and each
    checkpoint runs a copy of it. A benchmark that takes no model has no `--model` at all."""
    import argparse

    import pytest
    from pydantic import BaseModel

    from evaldag.benchmarks import toy
    from evaldag.engine.benchmark import Benchmark, MetricMenu
    from evaldag.engine.cli.main import parser
    from evaldag.engine.registry import BENCHMARKS

    seen: list = []
    built: list = []

    class SeenConfig(BaseModel):
        model: str | None = None
        metrics: tuple[str, ...] = ("toy_probability",)

    class ModelSeen(Benchmark):
        name, group, Config, takes_model = "modelseen", "TOY", SeenConfig, True

        def config_from_args(self, args: argparse.Namespace) -> SeenConfig:
            seen.append((args.model, getattr(args, "models", "absent")))
            return SeenConfig(model=args.model, metrics=self.metrics_from_args(args))

        def metric_menu(self) -> MetricMenu:
            return MetricMenu(default=("toy_probability",), all=("toy_probability",))

        def build(self, cfg: SeenConfig):
            built.append(cfg.model)
            return toy.nodes(cfg.metrics), toy.resources()

    BENCHMARKS.add(ModelSeen)
    try:
        out = tmp_path / "out"
        argv = ["run", "modelseen", "--model", "ckpt-a", "--model", "ckpt-b", "--out", str(out),
                "--cache-dir", str(tmp_path / "cache"), "--quiet"]
        assert cli.main(argv) == 0
        assert seen == [("ckpt-a", "absent")]  # the Namespace read once, the first checkpoint a string
        assert built == ["ckpt-a", "ckpt-b"]  # each checkpoint's run: a copy of the config (Benchmark.for_model)
        assert (out / "ckpt-a" / "TOY_EVAL.json").is_file() and (out / "ckpt-b" / "TOY_EVAL.json").is_file()
        # declared once, by the CLI, for every benchmark that takes a model (TOFU's, WEAT's, EDITING's shared flags too)
        args = parser(["tofu", "weat", "editing", "modelseen"], command="run").parse_args(
            ["run", "tofu", "weat", "editing", "modelseen", "--model", "x", "--model", "y"])
        assert args.models == ["x", "y"] and not hasattr(args, "model")
    finally:
        BENCHMARKS.remove("modelseen")
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # toy takes no model: --model is not an option of its run
        cli.main(["run", "toy", "--model", "x", "--out", str(tmp_path / "t"), "--cache-dir", str(tmp_path / "cache")])
    assert e.value.code == 2 and "unrecognized arguments: --model x" in capsys.readouterr().err
