"""The editing benchmark end to end on a real edit of the demo checkpoint, and its bad-input errors."""

import json
import re
import shutil
from pathlib import Path

import pytest

from evaldag.benchmarks.editing import spec
from evaldag.benchmarks.editing.config import ALL_METRICS, CORPUS_METRICS, DEFAULT_METRICS, GROUPS, EditingConfig
from evaldag.benchmarks.editing.data import load_edits, normalise_edit
from evaldag.benchmarks.editing.make_edit import make_edited_checkpoint
from evaldag.benchmarks.editing.report import heatmap_svg
from evaldag.engine import cli, run
from evaldag.engine.registry import BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "benchmarks" / "demo" / "assets" / "models" / "target"


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    """The demo checkpoint with the first two shipped edits made at layer 1, and those edits as a file."""
    tmp = tmp_path_factory.mktemp("edited")
    edits = load_edits()[:2]
    (tmp / "edits.json").write_text(json.dumps(edits))
    probs = make_edited_checkpoint(BASE, tmp / "model", edits, layer=1, steps=20)
    assert min(probs) > 0.5
    return tmp / "model"


def test_edit_shows_real_signal(edited, cache_dir):
    every = tuple(m for m in ALL_METRICS if m not in CORPUS_METRICS)  # the ROME diagnostics need --corpus
    cfg = EditingConfig(model=str(edited), base_model=str(BASE), metrics=every, trace_samples=3, trace_edits=(0,),
                        edits=str(edited.parent / "edits.json"))
    res = run(spec.nodes(cfg), spec.resources(cfg), cache_dir=str(cache_dir))
    assert res.ok, [r.error for r in res.failures()]
    out = res.results("EDITING")
    norms = out["weight_delta_norm"].to_dict()
    assert list(norms["value_by_index"]) == ["1"] and norms["agg_value"] == norms["value_by_index"]["1"] > 0
    # efficacy and generalisation rise from 0 on the original to 1 on the edited model
    assert out["efficacy_base"].agg_value == 0.0 and out["generalization_base"].agg_value == 0.0
    assert out["efficacy"].agg_value == 1.0 and out["generalization"].agg_value == 1.0
    assert out["efficacy_dataset"].agg_value == 1.0
    assert out["specificity_base"].agg_value == 1.0
    assert out["perplexity_change"].agg_value == pytest.approx(out["perplexity"].agg_value - out["perplexity_base"].agg_value)
    trace = out["causal_trace"].value_by_index["0"]
    assert trace["answer"] == "Poznan" and trace["high"] > trace["low"]
    assert len(trace["scores"]) == len(trace["tokens"]) and len(trace["scores"][0]) == 2
    svg = heatmap_svg(trace, "edit 0")
    values = [float(x) for x in re.findall(r'data-value="([^"]+)"', svg)]
    assert values == pytest.approx([p for row in trace["scores"] for p in row], rel=1e-5)
    sub = trace["subject_last"]
    assert f"subject's last token: layer {sub['best_layer']} (+{sub['effect']:.3f})" in svg.replace("&#x27;", "'")


def test_preflight_refuses_bad_input_before_any_forward(edited, tmp_path):
    three = tmp_path / "three"
    shutil.copytree(BASE, three)
    cfg = json.loads((three / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (three / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="different architectures"):
        spec.resources(EditingConfig(model=str(three), base_model=str(BASE)))
    with pytest.raises(ValueError, match="layer 5 is out of range: the base model has 2 layers"):
        spec.resources(EditingConfig(model=str(edited), base_model=str(BASE), layers=(5,)))
    with pytest.raises(ValueError, match="trace edit index 9 is out of range"):
        spec.resources(EditingConfig(model=str(edited), base_model=str(BASE), trace_edits=(9,)))
    bad = tmp_path / "edits.jsonl"
    bad.write_text(json.dumps({"prompt": "Where was Ann born? ", "subject": "Bob", "target_true": "X", "target_new": "Y"}) + "\n")
    with pytest.raises(ValueError, match=r"edits.jsonl: edit 0: subject 'Bob' is not in its prompt"):
        spec.resources(EditingConfig(model=str(edited), base_model=str(BASE), edits=str(bad)))
    with pytest.raises(ValueError, match="needs --model EDITED_DIR and --base-model"):
        spec.resources(EditingConfig(model=str(edited)))


def test_counterfact_rows_are_filled_in():
    row = {"case_id": 7, "requested_rewrite": {"prompt": "{} was born in", "subject": "Ann Lee",
                                               "target_true": {"str": "Paris"}, "target_new": {"str": "Rome"}},
           "paraphrase_prompts": ["Where was Ann Lee born? Ann Lee was born in"], "neighborhood_prompts": ["Bo was born in"]}
    flat = normalise_edit(row, 0)
    assert flat == {"case_id": 7, "prompt": "Ann Lee was born in", "subject": "Ann Lee", "target_true": "Paris",
                    "target_new": "Rome", "paraphrase_prompts": row["paraphrase_prompts"], "neighborhood_prompts": ["Bo was born in"]}
    with pytest.raises(ValueError, match="has no"):
        normalise_edit({"requested_rewrite": {**row["requested_rewrite"], "prompt": "no slot"}}, 3)


def test_cli_writes_editing_eval(edited, tmp_path, cache_dir):
    out = tmp_path / "out"
    argv = ["run", "editing", "--quiet", "--model", str(edited), "--base-model", str(BASE), "--edits",
            str(edited.parent / "edits.json"), "--metrics", "weight_delta_norm,efficacy,causal_trace", "--trace-samples", "2",
            "--out", str(out), "--cache-dir", str(cache_dir)]
    assert cli.main(argv) == 0
    ev = json.loads((out / "EDITING_EVAL.json").read_text())
    summary = json.loads((out / "EDITING_SUMMARY.json").read_text())
    assert set(ev) == {"weight_delta_norm", "efficacy", "causal_trace"}
    assert list(ev["weight_delta_norm"]["value_by_index"]) == ["1"]
    assert summary["weight_delta_norm"] == ev["weight_delta_norm"]["agg_value"] > 0
    assert summary["efficacy"] == 1.0
    page = (out / "report.html").read_text()
    assert page.count('data-plot="causal-trace"') == 2  # one heat map per traced edit
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"prompt": "Where was Ann born? ", "subject": "Bob", "target_true": "X", "target_new": "Y"}]))
    assert cli.main(["run", "editing", "--quiet", "--model", str(edited), "--base-model", str(BASE), "--edits", str(bad),
                     "--out", str(tmp_path / "o2"), "--cache-dir", str(cache_dir)]) == 2


def test_cli_bad_flags_are_one_line(tmp_path, capsys):
    base = ["run", "editing", "--model", str(BASE), "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as stop:  # argparse's own exit
        cli.main([*base, "--base-model", str(BASE), "--trace-samples", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace-samples: wants a whole number > 0, not '0'" in err
    assert cli.main([*base, "--base-model", "/nowhere/model"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--base-model /nowhere/model: no such folder: /nowhere/model" in err


def test_metric_group_words_are_not_metric_names():
    assert not set(GROUPS) & set(ALL_METRICS)
    assert set(DEFAULT_METRICS) <= set(ALL_METRICS) and all(set(g) <= set(ALL_METRICS) for g in GROUPS.values())


@pytest.mark.parametrize("order", [("editing", "tofu"), ("tofu", "editing")])
def test_editing_and_tofu_options_parse_together(order):
    """Either order of benchmarks on one command line gives both their options (the shared ones once)."""
    from evaldag.engine.cli.main import parser
    from evaldag.engine.options import read

    parsed = parser(list(order), command="run").parse_args(
        ["run", *order, "--model", "m", "--base-model", "b", "--retain-model", "r", "--trace-samples", "3", "--ppl-per-text"])
    run = read(parsed, [BENCHMARKS.get(b) for b in order])  # as `evaldag run` reads each benchmark's config
    cfg = run.configs[order.index("editing")]
    assert cfg.model == "m" and cfg.base_model == "b" and cfg.trace_samples == 3 and cfg.ppl_per_text is True
    assert run.configs[order.index("tofu")].retain_model == "r" and run.sweep.models == ("m",)
    ppl = [n for n in spec.nodes(cfg) if n.name.startswith("perplexity")]
    assert len(ppl) == 3 and all(n.params.per_text for n in ppl)


def test_model_specs_name_the_checkpoints_and_a_server_model_cannot_give_weights(edited, tmp_path, capsys, cache_dir):
    """--model/--base-model take model specs as every benchmark does. `hf:DIR` is the
    folder itself (same fingerprints: the bare-path run's cache serves it, same numbers), and a
    server model (openai:URL) is refused for the metric that reads both checkpoints' weights,
    in one line, before anything is contacted or loaded."""
    common = ["run", "editing", "--quiet", "--edits", str(edited.parent / "edits.json"),
              "--metrics", "weight_delta_norm,perplexity", "--cache-dir", str(cache_dir)]
    assert cli.main([*common, "--model", str(edited), "--base-model", str(BASE), "--out", str(tmp_path / "a")]) == 0
    assert cli.main([*common, "--model", f"hf:{edited}", "--base-model", f"hf:{BASE}", "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / x / "run.json").read_text()) for x in "ab")
    assert {n["status"] for n in b["nodes"].values()} == {"cached"}  # the same models, by fingerprint
    assert (tmp_path / "a" / "EDITING_SUMMARY.json").read_bytes() == (tmp_path / "b" / "EDITING_SUMMARY.json").read_bytes()
    capsys.readouterr()
    server = "openai:http://127.0.0.1:9/v1"
    assert cli.main([*common, "--model", str(edited), "--base-model", server, "--tokenizer", str(BASE),
                     "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "weight_delta_norm reads both checkpoints' weights" in err
    assert f"--base-model {server} is a server model" in err and not (tmp_path / "c").exists()
