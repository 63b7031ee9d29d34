"""Model transforms (engine/transforms.py, adapters/hf_derived.py): the spec parsed with one-line
errors, the derived fingerprint made of the parent's and the transform's identity, the derived
model run through the same executor, cache and outputs as a checkpoint (``--attack``), and the
backends that cannot hand over weights refused before any work."""

import json
from pathlib import Path

import pydantic
import pytest
import torch

from evaldag.engine import transforms
from evaldag.engine.adapters.hf import HFModel

from ..inprocess import run_cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TARGET = FIX / "tiny-llama" / "target"


class ScaleParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    factor: float = 0.5
    where: str = "mlp"


@transforms.register
class Scale(transforms.Transform):
    """Multiplies the weights whose name holds ``where`` by ``factor`` (a test's transform)."""

    name = "scale-test"
    version = "3"
    Params = ScaleParams
    positional = "factor"

    def apply(self, model, tokenizer):
        with torch.no_grad():
            for n, p in model.named_parameters():
                if self.params.where in n:
                    p.mul_(self.params.factor)
        return model


def test_spec_parses_with_defaults_and_a_positional_value():
    t = transforms.parse("scale-test:0.25")
    assert t.params == ScaleParams(factor=0.25) and t.spec() == "scale-test:factor=0.25,where=mlp"
    assert transforms.parse("scale-test").params == ScaleParams()
    assert transforms.parse("scale-test:where=attn,factor=2").params == ScaleParams(factor=2.0, where="attn")
    assert t.folder() == "scale-test_0.25"
    assert transforms.parse("scale-test:where=a/b").folder() == "scale-test_where=a_b"


@pytest.mark.parametrize("text, line", [
    ("scale-tst:0.5", "--attack scale-tst:0.5: unknown model attack 'scale-tst'; did you mean scale-test? known: "),
    ("scale-test:fator=2", "--attack scale-test:fator=2: scale-test has no parameter 'fator'; did you mean factor? "
                           "its parameters: factor, where"),
    ("scale-test:factor=big", "--attack scale-test:factor=big: scale-test's factor=big: Input should be a valid number"),
    ("scale-test:1,2", "--attack scale-test:1,2: scale-test's parameter factor is given twice"),
    (":x", "--attack ':x': no model attack named"),
])
def test_bad_specs_are_one_line_with_the_close_match(text, line):
    with pytest.raises(transforms.TransformError) as e:
        transforms.parse(text)
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


def test_derived_fingerprint_is_parent_plus_name_version_and_params():
    parent = HFModel(str(TARGET))
    a = parent.derive(transforms.parse("scale-test:0.5"))
    b = parent.derive(transforms.parse("scale-test:factor=0.5,where=mlp"))
    c = parent.derive(transforms.parse("scale-test:0.25"))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint() != parent.fingerprint()
    assert a.fingerprint() == transforms.parse("scale-test:0.5").derived_fingerprint(parent.fingerprint())
    Scale.version = "4"
    try:  # a new code version is a new model
        assert parent.derive(transforms.parse("scale-test:0.5")).fingerprint() != a.fingerprint()
    finally:
        Scale.version = "3"
    other = HFModel(str(FIX / "tiny-llama" / "retain")).derive(transforms.parse("scale-test:0.5"))
    assert other.fingerprint() != a.fingerprint()
    assert a.describe()["derived"] == {"parent": parent.fingerprint(), "spec": "scale-test:factor=0.5,where=mlp",
                                       "transform": {"name": "scale-test", "version": "3", "data": None,
                                                     "params": {"factor": 0.5, "where": "mlp"}}}


def test_derived_model_loads_a_private_copy_and_leaves_the_parent_alone():
    parent = HFModel(str(TARGET))
    before = parent.load().model.model.layers[0].mlp.down_proj.weight.detach().clone()
    derived = parent.derive(transforms.parse("scale-test:0.5"))
    got = derived.load().model.model.layers[0].mlp.down_proj.weight
    assert torch.equal(got, before * 0.5)
    assert torch.equal(parent.load().model.model.layers[0].mlp.down_proj.weight, before)
    assert isinstance(derived, HFModel) and derived.capabilities() == parent.capabilities()


def _tofu(tmp, out, *extra, model=str(TARGET)):
    return run_cli(["run", "tofu", "--model", model, "--data", FIX / "tofu_tiny", "--limit", "4",
                    "--metrics", "forget_Q_A_Prob,forget_truth_ratio", "--quiet", "--out", tmp / out,
                    "--cache-dir", tmp / "cache", *extra])


def _summary(folder):
    return json.loads((folder / "TOFU_SUMMARY.json").read_text())


def test_attack_writes_the_plain_run_and_the_attacked_run_as_a_plain_run_of_those_weights(tmp_path):
    proc = _tofu(tmp_path, "out", "--attack", "scale-test:0.5")
    assert proc.returncode == 0, proc.stderr
    plain = _tofu(tmp_path, "plain")
    assert plain.returncode == 0 and _summary(tmp_path / "out") == _summary(tmp_path / "plain")
    # the same weights saved as a folder: a plain run of it gives the attacked run's numbers
    model = HFModel(str(TARGET)).derive(transforms.parse("scale-test:0.5")).load().model
    folder = tmp_path / "scaled"
    model.save_pretrained(folder)
    for f in TARGET.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            (folder / f.name).write_bytes(f.read_bytes())
    assert _tofu(tmp_path, "ref", model=str(folder)).returncode == 0
    attacked = tmp_path / "out" / "attacks" / "scale-test_0.5"
    assert _summary(attacked) == _summary(tmp_path / "ref") != _summary(tmp_path / "plain")
    evals = json.loads((attacked / "TOFU_EVAL.json").read_text())
    ref = json.loads((tmp_path / "ref" / "TOFU_EVAL.json").read_text())
    assert evals == ref
    run = json.loads((attacked / "run.json").read_text())
    assert run["provenance"]["resources"]["model"]["derived"]["spec"] == "scale-test:factor=0.5,where=mlp"
    # warm: nothing computed again
    again = _tofu(tmp_path, "out2", "--attack", "scale-test:0.5")
    assert again.returncode == 0
    run2 = json.loads((tmp_path / "out2" / "attacks" / "scale-test_0.5" / "run.json").read_text())
    assert {n["status"] for n in run2["nodes"].values()} == {"cached"}


@pytest.mark.parametrize("model, backend", [("toy:0", "toy"), ("openai:http://127.0.0.1:9/v1", "openai"),
                                            (f"vllm:{TARGET}", "vllm"), ("replay:answers.jsonl", "replay")])
def test_a_backend_that_cannot_hand_over_weights_is_refused_before_any_work(tmp_path, model, backend):
    extra = ("--tokenizer", str(TARGET)) if backend == "openai" else ()
    proc = _tofu(tmp_path, "out", "--attack", "scale-test", *extra, model=model)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"evaldag: error: --attack scale-test: the model {model} is served by the {backend} "
                                  "backend, which cannot hand over its weights") and proc.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_a_library_caller_gets_the_same_refusal_from_the_resource():
    from evaldag.engine.adapters.toy import ToyModel

    with pytest.raises(transforms.TransformError, match=r"^--attack scale-test: the model toy.* is served by the toy backend"):
        transforms.derive_resources({"model": ToyModel(seed=0)}, transforms.parse("scale-test"))
    with pytest.raises(transforms.TransformError, match=r"^--attack scale-test: this run has no model to attack$"):
        transforms.derive_resources({"data": 1}, transforms.parse("scale-test"))


def test_an_in_memory_model_is_copied_not_changed():
    """A model handed over in memory (the Trainer callback's): the derived model works on a deep copy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(TARGET).eval()
    parent = HFModel.from_pretrained_objects(model, AutoTokenizer.from_pretrained(TARGET))
    before = model.model.layers[1].mlp.up_proj.weight.detach().clone()
    derived = parent.derive(transforms.parse("scale-test:2"))
    assert derived.fingerprint() == transforms.parse("scale-test:2").derived_fingerprint(parent.fingerprint())
    got = derived.load().model
    assert got is not model and torch.equal(got.model.layers[1].mlp.up_proj.weight, before * 2)
    assert torch.equal(model.model.layers[1].mlp.up_proj.weight, before)
