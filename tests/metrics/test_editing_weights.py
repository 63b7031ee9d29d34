"""weight_deltas / manipulated_layers providers and weight_delta_norm against torch.linalg on two state dicts."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from evaldag.engine import run
from evaldag.engine.adapters import HFModel
from evaldag.engine.adapters.hf.hf_weights import WeightDeltas, check_model_dirs
from evaldag.metrics.editing.weight_delta_norm import weight_delta_norm

BASE = Path(__file__).resolve().parents[2] / "benchmarks" / "demo" / "assets" / "models" / "target"


def _edited_copy(tmp: Path, layer: int = 1, scale: float = 0.05, extra: dict | None = None) -> Path:
    """A copy of the demo checkpoint with a rank-one change to one down-projection."""
    out = tmp / f"edited-{layer}"
    shutil.copytree(BASE, out)
    sd = load_file(str(out / "model.safetensors"))
    name = f"model.layers.{layer}.mlp.down_proj.weight"
    g = torch.Generator().manual_seed(0)
    u, v = torch.randn(sd[name].shape[0], 1, generator=g), torch.randn(1, sd[name].shape[1], generator=g)
    sd[name] = sd[name] + scale * (u @ v)
    for k, t in (extra or {}).items():
        sd[k] = sd[k] + t
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def test_norm_equals_torch_linalg_on_the_state_dicts(tmp_path, cache_dir):
    edited = _edited_copy(tmp_path, layer=1)
    a, b = load_file(str(BASE / "model.safetensors")), load_file(str(edited / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj.weight"
    expect_fro = float(torch.linalg.matrix_norm(a[name] - b[name]))
    expect_spec = float(torch.linalg.matrix_norm(a[name] - b[name], ord=2))
    assert expect_fro > 0
    res = run([weight_delta_norm(name="weight_delta_norm"), weight_delta_norm(name="spectral", ord="spectral")],
              {"model": HFModel(edited), "base_model": HFModel(BASE)}, cache_dir=str(cache_dir))
    assert res.ok
    fro = res["weight_delta_norm"].to_dict()
    assert fro["value_by_index"] == {"1": pytest.approx(expect_fro, rel=1e-6)}
    assert fro["agg_value"] == pytest.approx(expect_fro, rel=1e-6)
    assert res["spectral"].to_dict()["agg_value"] == pytest.approx(expect_spec, rel=1e-5)
    # a rank-one delta: spectral == Frobenius
    assert expect_spec == pytest.approx(expect_fro, rel=1e-5)


def test_deltas_sign_layers_and_single_read(tmp_path):
    bias = {"model.layers.0.self_attn.q_proj.weight": torch.full((64, 64), 0.5)}
    edited = _edited_copy(tmp_path, layer=1, extra=bias)
    d = WeightDeltas(HFModel(BASE), HFModel(edited))
    assert d.nonzero_layers() == [0, 1]
    n_params = len(d.param_names)
    assert d.tensors_read == n_params
    # original - edited (lm-debugger's sign)
    assert torch.allclose(d.layer(0)["model.layers.0.self_attn.q_proj.weight"], torch.full((64, 64), -0.5))
    assert set(d.layer(1)) == {n for n in d.param_names if n.startswith("model.layers.1.")}
    d.down_proj(1)
    assert d.tensors_read == n_params  # remembered, never read twice
    assert d.changed() == ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"]


def test_max_over_several_layers_and_explicit_layers(tmp_path, cache_dir):
    edited = _edited_copy(tmp_path, layer=0, scale=0.2)
    sd = load_file(str(edited / "model.safetensors"))
    sd["model.layers.1.mlp.down_proj.weight"] += 0.01
    save_file(sd, str(edited / "model.safetensors"), metadata={"format": "pt"})
    a = load_file(str(BASE / "model.safetensors"))
    want = {str(l): float(torch.linalg.matrix_norm(a[f"model.layers.{l}.mlp.down_proj.weight"] - sd[f"model.layers.{l}.mlp.down_proj.weight"]))
            for l in (0, 1)}
    res = run([weight_delta_norm(name="n"), weight_delta_norm(name="only0", layers=(0,))],
              {"model": HFModel(edited), "base_model": HFModel(BASE)}, cache_dir=str(cache_dir))
    got = res["n"].to_dict()
    assert got["value_by_index"] == pytest.approx(want, rel=1e-6)
    assert got["agg_value"] == pytest.approx(max(want.values()), rel=1e-6)
    assert list(res["only0"].to_dict()["value_by_index"]) == ["0"]


def test_different_architectures_and_shapes_are_refused(tmp_path):
    three = tmp_path / "three-layers"
    shutil.copytree(BASE, three)
    cfg = json.loads((three / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (three / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="different architectures.*num_hidden_layers: 2 vs 3"):
        check_model_dirs(BASE, three)
    wide = tmp_path / "wide"
    shutil.copytree(BASE, wide)
    sd = load_file(str(wide / "model.safetensors"))
    sd["model.layers.0.mlp.down_proj.weight"] = torch.zeros(64, 256)
    save_file(sd, str(wide / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model.layers.0.mlp.down_proj.weight has shape \[64, 128\].*\[64, 256\]"):
        check_model_dirs(BASE, wide)


def test_layer_out_of_range_is_an_error(tmp_path, cache_dir):
    edited = _edited_copy(tmp_path)
    res = run([weight_delta_norm(name="n", layers=(7,))], {"model": HFModel(edited), "base_model": HFModel(BASE)},
              cache_dir=str(cache_dir))
    assert not res.ok
    assert "layer 7 is out of range: the model has 2 layers" in res.record("n").error
