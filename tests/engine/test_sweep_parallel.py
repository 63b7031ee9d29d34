"""Checkpoint-parallel sweeps under torchrun: 2 gloo ranks on 127.0.0.1.

``--parallel checkpoints`` gives each rank whole checkpoints (each loaded once, on one
rank), after the retain model's work is done once by both; ``requests`` shards every
checkpoint's requests; ``auto`` picks by checkpoints against ranks. Either way the outputs
are byte-identical to a one-process sweep.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaldag.engine import cli
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.distributed.checkpoints import assign, choose_mode

from ..servers import free_port
from .test_distributed import _ranks
from .test_sweep import ARGS, TINY
from tests.conftest_models import nudged_checkpoint


def _run_json(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())


def test_auto_chooses_by_checkpoints_against_ranks_and_deals_the_largest_first(tmp_path):
    assert choose_mode("auto", 3, 2) == ("checkpoints", "auto: 3 checkpoints >= 2 ranks")
    assert choose_mode("auto", 2, 4) == ("requests", "auto: 2 checkpoints < 4 ranks")
    assert choose_mode("auto", 8, 2, cache_reads="rank0")[0] == "requests"
    with pytest.raises(ValueError, match="EVALDAG_DIST_CACHE_READS=rank0"):
        choose_mode("checkpoints", 8, 2, cache_reads="rank0")
    sizes = {"big": 300, "mid": 200, "small": 100, "tiny": 50}
    for name, size in sizes.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"x" * size)
    models = [str(tmp_path / n) for n in ("tiny", "mid", "big", "small")]
    # largest first to the least loaded rank: big -> 0, mid -> 1, small -> 1 (200 < 300), tiny -> 0 (300 = 300, lowest)
    got = assign(models, 2)
    assert got == [[str(tmp_path / "big"), str(tmp_path / "tiny")], [str(tmp_path / "mid"), str(tmp_path / "small")]]


@pytest.mark.slow
def test_two_ranks_with_whole_checkpoints_give_the_one_process_sweep(tmp_path):
    """3 checkpoints on 2 ranks (auto -> checkpoints). The request-sharded mode's equality with
    one process is test_distributed.py's; here each checkpoint must be loaded by one rank only."""
    names = ["target", "up", "down"]
    models = [TINY / "target", nudged_checkpoint(tmp_path / "up", 1.02), nudged_checkpoint(tmp_path / "down", 0.98)]
    flags = [f for m in models for f in ("--model", str(m))]
    ref = tmp_path / "ref"
    assert cli.main([*ARGS, *flags, "--out", str(ref), "--cache-dir", str(tmp_path / "c0")]) == 0
    assert _run_json(ref / "target")["provenance"]["sweep"]["parallel"] == "sequential"
    fps = {n: HFModel(str(m)).fingerprint() for n, m in zip(names, models)}

    out, cache = tmp_path / "out", tmp_path / "cache"
    argv = [*ARGS, *flags, "--out", str(out), "--cache-dir", str(cache)]
    done = _ranks([argv, argv], free_port(), tmp_path / "logs")
    assert [code for code, _ in done] == [0, 0], "\n".join(err[-2000:] for _, err in done)
    for n in names:  # byte-identical numbers to the one-process sweep
        for f in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):
            assert (out / n / f).read_bytes() == (ref / n / f).read_bytes(), (n, f)
    assert (out / "report.html").is_file()
    sweep = _run_json(out / "target")["provenance"]["sweep"]
    assert sweep["parallel"] == "checkpoints" and sweep["why"] == "auto: 3 checkpoints >= 2 ranks"
    by_rank = sweep["by_rank"]
    assert sorted(by_rank["0"] + by_rank["1"]) == sorted(names) and {len(by_rank["0"]), len(by_rank["1"])} == {1, 2}
    for n in names:  # each checkpoint loaded once, alone on its rank; the retain side came from the shared step
        ex = _run_json(out / n)["executor"]
        assert ex["models_loaded"] == [fps[n]] and "world_size" not in ex, (n, ex["models_loaded"])


def test_adapters_of_different_bases_run_grouped_by_base_and_the_plan_says_so(tmp_path):
    from evaldag.engine.sweep_plan import by_base

    def adapter(name: str, base: str) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
        return str(tmp_path / name)

    models = [adapter("a1", "/b/one"), str(TINY / "target"), adapter("b1", "/b/two"), adapter("a2", "/b/one"),
              adapter("b2", "/b/two")]
    order, note = by_base(models)
    assert order == [models[0], models[3], models[1], models[2], models[4]]
    assert note == ("evaldag: sweep: 4 adapter(s) over 2 base(s), run grouped by base, each base loaded once per "
                    "group: 2 over /b/one, 2 over /b/two")
    assert by_base(models, adapter_base="/copy")[0] == [models[0], models[2], models[3], models[4], models[1]]
    assert by_base([str(TINY / "target"), str(TINY / "retain")]) == ([str(TINY / "target"), str(TINY / "retain")], None)
