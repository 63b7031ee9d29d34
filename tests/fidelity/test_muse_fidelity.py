"""MUSE through the engine matches open-unlearning's MUSE logs; TOFU + MUSE in one run."""

import json
from pathlib import Path

import pytest

from evaldag.engine import cli

FIX = Path(__file__).parents[1] / "fixtures"
OU = FIX / "open_unlearning"


def _run(tmp, name, model, benches, *extra):
    out = tmp / name
    argv = ["run", *benches, "--quiet", "--model", str(FIX / "tiny-llama" / model), "--metrics", "default,exact_memorization,mia",
            "--reference-model", str(FIX / "tiny-llama" / "retain"), "--out", str(out), "--cache-dir", str(tmp / "cache"), *extra]
    assert cli.main(argv) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("muse")
    retain = _run(tmp, "retain", "retain", ["muse"], "--data", str(FIX / "muse_tiny"))
    target = _run(tmp, "target", "target", ["muse"], "--data", str(FIX / "muse_tiny"), "--retain-logs", str(OU / "retain_MUSE_EVAL.json"))
    return {"retain": retain, "target": target}


@pytest.mark.parametrize("model", ["retain", "target"])
def test_every_muse_metric_matches_open_unlearning(runs, model):
    ours = json.loads((runs[model] / "MUSE_EVAL.json").read_text())
    ref = json.loads((OU / f"{model}_MUSE_EVAL.json").read_text())
    assert set(ref) <= set(ours)
    for name, block in ref.items():
        tol = 1e-2 if "ROUGE" in name else 1e-3
        assert ours[name]["agg_value"] == pytest.approx(block["agg_value"], abs=tol), name
        for k, item in (block.get("value_by_index") or {}).items():
            if "generation" in item:
                mine = ours[name]["value_by_index"][k]
                assert (mine["input"], mine["ground_truth"], mine["generation"]) == (item["input"], item["ground_truth"], item["generation"])
    summary = json.loads((runs[model] / "MUSE_SUMMARY.json").read_text())
    assert summary == pytest.approx(json.loads((OU / f"{model}_MUSE_SUMMARY.json").read_text()), abs=1e-3)


def test_stop_strings_cut_knowmem_generations_during_generation(runs):
    ex = json.loads((runs["retain"] / "run.json").read_text())["executor"]["by_kind"]["generate"]
    ours = json.loads((runs["retain"] / "MUSE_EVAL.json").read_text())
    gens = [v["generation"] for v in ours["forget_knowmem_ROUGE"]["value_by_index"].values()]
    assert all("\nQuestion" not in g and "\n\n" not in g for g in gens)
    assert ex["unique"] == 20 + 20 + 8


def test_tofu_and_muse_in_one_run_share_the_stage_and_the_cache(tmp_path):
    out = _run(tmp_path, "both", "target", ["tofu", "muse"], "--tofu-data", str(FIX / "tofu_tiny"), "--muse-data", str(FIX / "muse_tiny"))
    for bench in ("TOFU", "MUSE"):
        ours = json.loads((out / f"{bench}_SUMMARY.json").read_text())
        alone = json.loads((OU / f"target_{bench}_SUMMARY.json").read_text())
        for name in ("extraction_strength", "mia_loss", "mia_min_k"):
            assert ours[name] == pytest.approx(alone[name], abs=1e-3), (bench, name)
    run = json.loads((out / "run.json").read_text())
    assert "TOFU/privleak" in run["nodes"] and "MUSE/privleak" in run["nodes"]
    ex = run["executor"]
    assert ex["sequences_forwarded"] == ex["unique"] - ex["cached"] and ex["generations"] == 124 + 48
    again = _run(tmp_path, "again", "target", ["tofu", "muse"], "--tofu-data", str(FIX / "tofu_tiny"), "--muse-data", str(FIX / "muse_tiny"))
    assert json.loads((again / "run.json").read_text())["executor"]["model_loaded"] is False
