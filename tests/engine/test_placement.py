"""--device-map auto: a checkpoint split by accelerate gives the same numbers and fingerprint."""

import json
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine import cli
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.adapters.placement import parse_max_memory
from evaldag.engine.requests import Generate, GenerationSettings, TokenStats

pytest.importorskip("accelerate")

TARGET = Path(__file__).parents[1] / "fixtures" / "tiny-llama" / "target"
# The tiny checkpoint is 855 KB; accelerate keeps room for its largest layer, so a 700 KB
# cap puts the embeddings and layer 0 in CPU memory and the rest in the offload folder.
CAP = {"cpu": "700KB"}


def test_max_memory_text_parses_devices_and_sizes():
    assert parse_max_memory("0=20GiB, 1=18GiB,cpu=64GB") == {0: "20GiB", 1: "18GiB", "cpu": "64GB"}
    assert parse_max_memory(None) is None
    with pytest.raises(ValueError, match="DEVICE=SIZE"):
        parse_max_memory("cpu:64GB")


def test_a_model_split_by_accelerate_gives_the_same_fingerprint_and_numbers(tmp_path):
    whole = HFModel(TARGET, dtype="fp32", device="cpu")
    split = HFModel(TARGET, dtype="fp32", device="cpu", device_map="auto", max_memory=CAP, offload_folder=str(tmp_path))
    assert split.fingerprint() == whole.fingerprint()

    a, b = whole.load(), split.load()
    where = split.describe()["device_map"]
    assert set(where.values()) == {"cpu", "disk"}, where  # really split
    assert where["model.embed_tokens"] == "cpu" and where["lm_head"] == "disk"

    enc = whole.encoder()
    q, ans = enc.encode("Question: Who wrote the book?\nAnswer:"), enc.encode(" A writer from the city.")
    reqs = [TokenStats(tuple(q), tuple(ans)), TokenStats(tuple(q[:5]), tuple(ans[:3]))]
    for x, y in zip(a.run_batch(reqs), b.run_batch(reqs)):
        np.testing.assert_array_equal(x.logprob, y.logprob)
        np.testing.assert_array_equal(x.argmax, y.argmax)
        np.testing.assert_array_equal(x.var, y.var)
    gen = [Generate(tuple(q), GenerationSettings(max_new_tokens=6))]
    np.testing.assert_array_equal(a.run_batch(gen)[0].token_ids, b.run_batch(gen)[0].token_ids)


def test_an_unknown_device_map_is_refused():
    with pytest.raises(ValueError, match="device_map must be one of"):
        HFModel(TARGET, device_map="everywhere")


def test_the_cli_runs_a_split_model_to_the_same_outputs_on_the_same_cache(tmp_path):
    fix = Path(__file__).parents[1] / "fixtures"
    args = ["run", "tofu", "--model", str(TARGET), "--data", str(fix / "tofu_tiny"), "--metrics", "forget_Q_A_Prob",
            "--device", "cpu", "--quiet", "--cache-dir", str(tmp_path / "cache")]
    assert cli.main([*args, "--out", str(tmp_path / "whole"), "--cache-dir", str(tmp_path / "c0")]) == 0
    assert cli.main([*args, "--out", str(tmp_path / "split"), "--device-map", "auto", "--max-memory", "cpu=700KB"]) == 0
    for name in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):
        assert (tmp_path / "split" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    # the same fingerprint: the whole model, run next on the split model's cache, finds everything cached
    assert cli.main([*args, "--out", str(tmp_path / "again")]) == 0
    ex = json.loads((tmp_path / "again" / "run.json").read_text())["executor"]
    assert ex["sequences_forwarded"] == 0 and not ex["model_loaded"]
