"""lm-debugger's MetricItem on evaldag: the docs' listings (the seed's NormOfWeightUpdate) from
Python and from the CLI, the token_logits kind (values, batching, the request-cache size cap,
the planner's refusal), the pre-intervention hook on the base model, and added attributes."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from evaldag.benchmarks.editing import spec
from evaldag.benchmarks.editing.config import EditingConfig
from evaldag.benchmarks.editing.data import load_edits
from evaldag.engine import cli, run
from evaldag.engine.cache import batches
from evaldag.engine.fingerprint import code_identity
from evaldag.metrics.editing import lm_debugger_compat as lmd
from evaldag.metrics.editing.logits_request import TokenLogits
from evaldag.metrics.editing.weight_delta_norm import weight_delta_norm

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "benchmarks" / "demo" / "assets" / "models" / "target"
DOC = ROOT / "docs" / "coming-from.md"


def _section_blocks(heading: str) -> list[str]:
    section = re.search(rf"## {re.escape(heading)}\n(.*?)(?=\n## |\Z)", DOC.read_text(), re.S).group(1)
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The demo checkpoint and a copy with layer 1 changed, two shipped edits; the docs' listings as my_metric.py."""
    tmp = tmp_path_factory.mktemp("lmd")
    edits = load_edits()[:2]
    (tmp / "edits.json").write_text(json.dumps(edits))
    shutil.copytree(BASE, tmp / "model")  # "edited": layer 1's MLP down-projection moved (no training: fast)
    weights = load_file(BASE / "model.safetensors")
    name = "model.layers.1.mlp.down_proj.weight"
    weights[name] = weights[name] + np.random.default_rng(0).normal(0, 0.05, weights[name].shape).astype(weights[name].dtype)
    save_file(weights, tmp / "model" / "model.safetensors", metadata={"format": "pt"})
    (tmp / "my_metric.py").write_text("\n\n".join(_section_blocks("lm-debugger")))
    spec_ = importlib.util.spec_from_file_location("lmd_docs_listing", tmp / "my_metric.py")
    module = importlib.util.module_from_spec(spec_)
    sys.modules["lmd_docs_listing"] = module
    spec_.loader.exec_module(module)
    cfg = EditingConfig(model=str(tmp / "model"), base_model=str(BASE), edits=str(tmp / "edits.json"))
    return tmp, module, cfg


def _logits(path, prompts):
    """The reference: each prompt alone through transformers, no evaldag code."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.inference_mode():
        return [model(**tok(p, return_tensors="pt")).logits[0].float().numpy() for p in prompts]


def test_seed_norm_of_weight_update_equals_weight_delta_norm(setup, cache_dir):
    tmp, module, cfg = setup
    res = run([module.NormOfWeightUpdate.metric().named("NormOfWeightUpdate", "EDITING"),
               weight_delta_norm().named("weight_delta_norm", "EDITING")], spec.resources(cfg), cache_dir=str(cache_dir))
    assert res.ok, [r.error for r in res.failures()]
    out = res.results("EDITING")
    norm = out["weight_delta_norm"].value_by_index
    assert list(norm) == ["1"] and norm["1"] > 0
    item = out["NormOfWeightUpdate"]
    assert item.value_by_index == {"0": {"Layer 1": pytest.approx(norm["1"], rel=1e-6)},
                                   "1": {"Layer 1": pytest.approx(norm["1"], rel=1e-6)}}
    assert item.agg_value == pytest.approx(norm["1"], rel=1e-6)
    assert item.extra["prompts"] == [e["prompt"] for e in load_edits()[:2]]
    again = run([module.NormOfWeightUpdate.metric().named("NormOfWeightUpdate", "EDITING")], spec.resources(cfg),
                cache_dir=str(cache_dir))
    assert again.record("EDITING/NormOfWeightUpdate").status == "cached"


def test_token_logits_and_hook_on_the_base_model(setup, cache_dir):
    """TopTokenChanged: its hook sees the unedited logits, its output the edited ones (checked
    against transformers directly); the logits are batched and, under the cap, stored."""
    tmp, module, cfg = setup

    class Peek(lmd.MetricItem):
        def pre_intervention_hook(self, prompt, token_logits=None):
            return [float(token_logits[-1].max()), int(token_logits.shape[0])]

        def get_text_outputs(self, prompt, token_logits, pre_hook_rv=None, **kwargs):
            return {"max": float(token_logits[-1].max()), "base_max": pre_hook_rv[0], "rows": int(token_logits.shape[0])}

    prompts = [e["prompt"] for e in load_edits()[:2]]
    res = run([Peek.metric().named("Peek", "EDITING"), module.TopTokenChanged.metric().named("TopTokenChanged", "EDITING")],
              spec.resources(cfg), cache_dir=str(cache_dir))
    assert res.ok, [r.error for r in res.failures()]
    edited, base = _logits(tmp / "model", prompts), _logits(BASE, prompts)
    got = res.results("EDITING")["Peek"].value_by_index
    for i in range(2):
        assert got[str(i)]["rows"] == edited[i].shape[0]
        assert got[str(i)]["max"] == pytest.approx(float(edited[i][-1].max()), abs=1e-4)
        assert got[str(i)]["base_max"] == pytest.approx(float(base[i][-1].max()), abs=1e-4)
    changed = res.results("EDITING")["TopTokenChanged"].value_by_index
    assert changed == {str(i): {"changed": float(edited[i][-1].argmax() != base[i][-1].argmax())} for i in range(2)}
    kinds = _stored_kinds(cache_dir)
    assert kinds.get("token_logits") == 4, kinds  # 2 prompts x 2 models, each served once for both metrics
    assert res.executor["by_kind"]["token_logits"]["batches"] == 2  # one batch of both prompts per model


def _stored_kinds(cache: Path) -> dict:
    """How many answers of each kind the request store holds, read from its batch files."""
    out: dict = {}
    for folder in batches.model_dirs(cache):
        for name in batches.names(folder):
            for _, kind, *_ in batches.read(cache, folder / name).rows:
                out[kind] = out.get(kind, 0) + 1
    return out


def test_size_cap_keeps_large_logits_out_of_the_request_store(setup, tmp_path, monkeypatch):
    """Over the cap, logits are served to the scorer but never stored: a second run (of a changed
    metric, so that its node is not cached) forwards the prompts again."""
    tmp, module, cfg = setup
    monkeypatch.setattr(TokenLogits, "max_stored_bytes", 1000)  # the demo's logits are ~40 kB per prompt
    cache = tmp_path / "c"
    nodes = [module.TopTokenChanged.metric().named("TopTokenChanged", "EDITING")]
    first = run(nodes, spec.resources(cfg), cache_dir=str(cache))
    assert first.ok, [r.error for r in first.failures()]
    assert first.executor["by_kind"]["token_logits"]["sequences_forwarded"] == 4  # 2 prompts x 2 models
    assert _stored_kinds(cache).get("token_logits", 0) == 0
    again = run([module.TopTokenChanged.metric(config={"changed": 1}).named("TopTokenChanged", "EDITING")],
                spec.resources(cfg), cache_dir=str(cache))
    assert again.executor["by_kind"]["token_logits"]["cached"] == 0
    assert again.executor["by_kind"]["token_logits"]["sequences_forwarded"] == 4
    monkeypatch.undo()  # under the default cap (1 MiB) the same answers are stored and served
    third = run([module.TopTokenChanged.metric(config={"changed": 2}).named("TopTokenChanged", "EDITING")],
                spec.resources(cfg), cache_dir=str(cache))
    fourth = run([module.TopTokenChanged.metric(config={"changed": 3}).named("TopTokenChanged", "EDITING")],
                 spec.resources(cfg), cache_dir=str(cache))
    assert third.executor["by_kind"]["token_logits"]["sequences_forwarded"] == 4
    assert fourth.executor["by_kind"]["token_logits"]["cached"] == 4
    assert fourth.results("EDITING")["TopTokenChanged"].value_by_index == first.results("EDITING")["TopTokenChanged"].value_by_index


def test_cli_add_metric_lands_in_editing_eval(setup, tmp_path, cache_dir):
    tmp, module, cfg = setup
    out = tmp_path / "out"
    argv = ["run", "editing", "--quiet", "--model", str(tmp / "model"), "--base-model", str(BASE), "--edits",
            str(tmp / "edits.json"), "--metrics", "weight_delta_norm", "--add-metric", f"{tmp / 'my_metric.py'}:NormOfWeightUpdate",
            "--out", str(out), "--cache-dir", str(cache_dir)]
    assert cli.main(argv) == 0
    ev = json.loads((out / "EDITING_EVAL.json").read_text())
    assert set(ev) == {"weight_delta_norm", "NormOfWeightUpdate"}
    norm = ev["weight_delta_norm"]["value_by_index"]["1"]
    assert ev["NormOfWeightUpdate"]["value_by_index"] == {"0": {"Layer 1": pytest.approx(norm, rel=1e-6)},
                                                         "1": {"Layer 1": pytest.approx(norm, rel=1e-6)}}
    summary = json.loads((out / "EDITING_SUMMARY.json").read_text())
    assert summary["NormOfWeightUpdate"] == pytest.approx(norm, rel=1e-6)
    assert not (out / "RUN_EVAL.json").exists()


def test_planner_refuses_a_backend_without_full_logits(setup, cache_dir):
    """A backend without full logits (the toy model here; a server, which answers top-k log-probs
    at most) is refused by the planner, naming the metric, before anything runs."""
    from evaldag.engine.adapters.toy import ToyModel
    from evaldag.engine.planner import PlanError

    tmp, module, cfg = setup
    with pytest.raises(PlanError, match=r"^TopTokenChanged\.pre_intervention_hook needs full-vocabulary logits; toy:0 gives "
                                        r".* or add --model-arg base:fallback=hf:DIR; TopTokenChanged needs full-vocabulary logits; .*"
                                        r"or add --model-arg fallback=hf:DIR$"):
        run([module.TopTokenChanged.metric().named("TopTokenChanged", "EDITING")],
            {"model": ToyModel(), "base_model": ToyModel(), "edits": load_edits()[:1]}, cache_dir=str(cache_dir))
    assert _stored_kinds(cache_dir) == {}  # refused before anything was stored


def test_attributes_interventions_and_added_ones(setup, cache_dir):
    tmp, module, cfg = setup
    n_texts = lmd.add_attribute("N_TEXTS", needs=("texts",), get=lambda texts: len(texts))

    class Seen(lmd.MetricItem):
        def __init__(self, controller):
            super().__init__(controller)
            self.parameters.need_parameter(lmd.Attributes.INTERVENTIONS)
            self.parameters.need_parameter(n_texts)

        def get_text_outputs(self, prompt, token_logits, pre_hook_rv=None, INTERVENTIONS=None, N_TEXTS=None):
            return {"edits": len(INTERVENTIONS), "texts": N_TEXTS, "mine": [r["prompt"] for r in INTERVENTIONS].index(prompt),
                    "layers": self.controller.config.num_layers}

    assert set(Seen.metric.needs) == {"model", "edits", "texts"}  # nothing of the weights is read
    assert Seen.metric.code.startswith(code_identity(Seen) + "+src:")  # fingerprinted by the class's source
    res = run([Seen.metric().named("Seen", "EDITING")], spec.resources(cfg), cache_dir=str(cache_dir))
    assert res.ok, [r.error for r in res.failures()]
    n = len(spec.resources(cfg)["texts"].value())
    assert res.results("EDITING")["Seen"].value_by_index == {
        "0": {"edits": 2, "texts": n, "mine": 0, "layers": 2}, "1": {"edits": 2, "texts": n, "mine": 1, "layers": 2}}
    assert np.isnan(res.results("EDITING")["Seen"].agg_value)  # several numbers per prompt: NaN, with its reason
    assert "several values per prompt" in res.results("EDITING")["Seen"].reason
    with pytest.raises(KeyError, match="no attribute 'NOPE'"):
        class Bad(lmd.MetricItem):
            def __init__(self, controller):
                super().__init__(controller)
                self.parameters.need_parameter("NOPE")


def test_cli_bad_metric_item_file_is_one_line(setup, tmp_path, cache_dir, capsys):
    tmp, module, cfg = setup
    bad = tmp_path / "bad_item.py"
    bad.write_text("from evaldag.metrics.editing.lm_debugger_compat import MetricItem\n\n\n"
                   "class EarlyConfig(MetricItem):\n"
                   "    def __init__(self, controller):\n"
                   "        super().__init__(controller)\n"
                   "        self.n = controller.config.num_layers\n")
    out = tmp_path / "out"
    argv = ["run", "editing", "--quiet", "--model", str(tmp / "model"), "--base-model", str(BASE), "--edits",
            str(tmp / "edits.json"), "--metrics", "weight_delta_norm", "--add-metric", f"{bad}:EarlyConfig",
            "--out", str(out), "--cache-dir", str(cache_dir)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"evaldag: error: --add-metric {bad}: importing it failed: DeclarationError: EarlyConfig.__init__ reads "
                   "controller.config, which is known only when the metric runs: read it in get_text_outputs"]
    assert not out.exists()
