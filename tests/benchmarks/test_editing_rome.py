"""ROME's rank-one edit (benchmarks/editing/rome_edit.py): the closed form's algebra checked
directly, and on the trace model the contrast ROME is known for: the edits take, and the
neighbours and unrelated texts barely move (fine-tuning the same matrix damages both,
tests/benchmarks/test_editing_tracer.py)."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from evaldag.benchmarks.editing import spec

from ..asset_builders.editing import make_tracer
from evaldag.benchmarks.editing.config import EditingConfig
from evaldag.benchmarks.editing.make_edit import main, make_edited_checkpoint
from evaldag.benchmarks.editing.rome_edit import RIDGE, _key, key_covariance, rome_update
from evaldag.engine import run
from evaldag.engine.adapters.hf.hf_encoder import HFEncoder

TRACER = make_tracer.TRACER
EDITS = json.loads((TRACER / "edits.json").read_text())
CORPUS = [t["text"] for t in json.loads((TRACER / "corpus.json").read_text())]  # no metric scores these


def test_update_maps_the_key_to_the_value_and_nothing_c_orthogonal_moves():
    tok = AutoTokenizer.from_pretrained(str(TRACER))
    model = AutoModelForCausalLM.from_pretrained(str(TRACER), dtype=torch.float32).eval()
    enc, down, edit = HFEncoder(tok), model.model.layers[2].mlp.down_proj, EDITS[0]
    cov = key_covariance(model, down, enc, CORPUS)
    k = _key(model, down, enc, edit["prompt"], edit["subject"])[2]
    before = down.weight.detach().double().clone()
    delta = rome_update(model, down, enc, edit, cov, steps=5).double()
    change = down.weight.detach().double() - before
    assert float(delta.norm()) > 0 and torch.linalg.matrix_rank(change, rtol=1e-6) == 1
    # W' k* = W k* + delta: the key now gives the searched value
    assert torch.allclose(change @ k, delta, atol=1e-5 * float(delta.norm()))
    # ROME's form: delta (C^-1 k*)^T / ((C^-1 k*)^T k*)
    c_inv_k = torch.linalg.solve(cov + RIDGE * torch.eye(cov.shape[0], dtype=cov.dtype), k)
    assert torch.allclose(change, torch.outer(delta, c_inv_k) / (c_inv_k @ k), atol=1e-6)
    # so a key x with x . C^-1 k* = 0 is left where it was
    x = torch.randn(k.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = x - (x @ c_inv_k) / (c_inv_k @ c_inv_k) * c_inv_k
    assert float((change @ x).norm()) < 1e-4 * float(delta.norm())
    assert all(p.requires_grad for p in model.parameters())  # the caller's flags are given back


def test_rome_on_the_trace_model_edits_without_collateral(tmp_path):
    edited = tmp_path / "rome"
    probs = make_edited_checkpoint(TRACER, edited, EDITS, layer=2, method="rome", corpus=CORPUS)
    assert min(probs) > 0.3 and sum(probs) / len(probs) > 0.8  # P(target_new) per token, after all eight edits
    cfg = EditingConfig(model=str(edited), base_model=str(TRACER), edits=str(TRACER / "edits.json"),
                        texts=str(TRACER / "texts.json"), ppl_per_text=True,
                        metrics=("weight_delta_norm", "efficacy", "efficacy_base", "generalization", "specificity",
                                 "perplexity", "perplexity_base"))
    res = run(spec.nodes(cfg), spec.resources(cfg), cache_dir=str(tmp_path / "cache"))
    assert res.ok, [r.error for r in res.failures()]
    out = res.results("EDITING")
    assert list(out["weight_delta_norm"].value_by_index) == ["2"]
    assert out["efficacy_base"].agg_value == 0.0 and out["efficacy"].agg_value == 1.0 and out["generalization"].agg_value == 1.0
    assert out["specificity"].agg_value == 1.0
    assert abs(out["perplexity"].agg_value / out["perplexity_base"].agg_value - 1) < 0.05  # fine-tuning: +45 %


def test_bad_requests_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="unknown edit method 'memit'"):
        make_edited_checkpoint(TRACER, tmp_path / "x", EDITS[:1], layer=2, method="memit")
    with pytest.raises(ValueError, match="ROME needs a corpus"):
        make_edited_checkpoint(TRACER, tmp_path / "x", EDITS[:1], layer=2, method="rome")
    # layer 1 of the trace model has no working MLP: its output, hence ROME's value scale, is zero
    with pytest.raises(ValueError, match="outputs zero at the subject's last token"):
        make_edited_checkpoint(TRACER, tmp_path / "x", EDITS[:1], layer=1, method="rome", corpus=CORPUS)
    assert not (tmp_path / "x").exists()


def test_make_edit_command_reports_bad_input_in_one_line(tmp_path, capsys):
    argv = [str(TRACER), str(tmp_path / "x"), "--edits", str(TRACER / "edits.json"), "--method", "rome"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: ROME needs a corpus" in err
    assert main([*argv, "--corpus", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err and not (tmp_path / "x").exists()
