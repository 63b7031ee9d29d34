"""nf4_changed_fraction: the 4-bit round trip of both checkpoints compared value by value."""

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from evaldag.engine import run
from evaldag.engine.adapters import HFModel

pytest.importorskip("bitsandbytes")
from bitsandbytes import functional as bnbf  # noqa: E402

from evaldag.metrics.editing.quantization import nf4_changed_fraction  # noqa: E402

BASE = Path(__file__).resolve().parents[2] / "benchmarks" / "demo" / "assets" / "models" / "target"


def _copy(tmp: Path, name: str, change) -> Path:
    out = tmp / name
    shutil.copytree(BASE, out)
    sd = load_file(str(out / "model.safetensors"))
    change(sd)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _linear(sd: dict, layer: int) -> list[str]:
    return sorted(n for n, t in sd.items() if n.startswith(f"model.layers.{layer}.") and n.endswith(".weight") and t.dim() == 2)


def _run(edited: Path, cache_dir, **params):
    res = run([nf4_changed_fraction(name="q", **params)], {"model": HFModel(edited), "base_model": HFModel(BASE)},
              cache_dir=str(cache_dir))
    assert res.ok, res
    return res["q"].to_dict()


def test_identical_weights_give_zero(tmp_path, cache_dir):
    same = _copy(tmp_path, "same", lambda sd: None)
    got = _run(same, cache_dir)
    assert got["agg_value"] == 0.0 and set(got["value_by_index"].values()) == {0.0}
    assert list(got["value_by_index"]) == ["0", "1"]


def test_weights_moved_across_every_bucket_give_one(tmp_path, cache_dir):
    """Every linear weight of layer 1 shifted by more than twice the largest |w|: every dequantized value moves."""
    def shift(sd):
        for n in _linear(sd, 1):
            sd[n] = sd[n] + 2 * sd[n].abs().max() + 1.0
    moved = _copy(tmp_path, "moved", shift)
    got = _run(moved, cache_dir)
    assert got["value_by_index"] == {"0": 0.0, "1": 1.0}
    sd = load_file(str(BASE / "model.safetensors"))
    n0, n1 = (sum(sd[n].numel() for n in _linear(sd, layer)) for layer in (0, 1))
    assert got["agg_value"] == n1 / (n0 + n1)
    assert got["changed_weights"] == n1 and got["compared_weights"] == n0 + n1


def test_values_not_raw_weights_are_compared(tmp_path, cache_dir):
    """A nudge inside one bucket changes a raw weight but no dequantized value: 0. Doubling a
    block's absmax moves the whole block of 64: the count is bitsandbytes' own on that tensor."""
    name = "model.layers.0.mlp.down_proj.weight"
    sd0 = load_file(str(BASE / "model.safetensors"))
    w = sd0[name].flatten()
    block = w[:64]
    small = int(block.abs().argmin())  # far from the absmax, deep inside its bucket

    def nudge(sd):
        t = sd[name].flatten().clone()
        t[small] += 1e-7
        sd[name] = t.view_as(sd[name])
    nudged = _copy(tmp_path, "nudged", nudge)
    assert not torch.equal(load_file(str(nudged / "model.safetensors"))[name], sd0[name])
    assert _run(nudged, cache_dir)["agg_value"] == 0.0

    top = int(block.abs().argmax())

    def grow(sd):
        t = sd[name].flatten().clone()
        t[top] *= 2
        sd[name] = t.view_as(sd[name])
    grown = _copy(tmp_path, "grown", grow)
    after = load_file(str(grown / "model.safetensors"))[name]
    rt = lambda x: bnbf.dequantize_4bit(*bnbf.quantize_4bit(x.contiguous(), blocksize=64, quant_type="nf4"))  # noqa: E731
    want = int((rt(sd0[name]) != rt(after)).sum())
    assert 32 < want <= 64  # the block's other values move with its absmax (a zero code stays zero)
    got = _run(grown, cache_dir)
    total = sum(sd0[n].numel() for n in _linear(sd0, 0))
    assert got["value_by_index"]["0"] == want / total and got["value_by_index"]["1"] == 0.0
