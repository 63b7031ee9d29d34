"""Open-unlearning's handlers and metric configs run as written (imports changed),
and ``--add-metric``'s one dispatch rule. Numbers are checked against values recomputed here
(scipy's KS test on the run's own truth ratios; the tiny model's NLL computed row by row)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine.added import classify
from evaldag.engine.cli.main import main

FIX = Path(__file__).parents[1] / "fixtures"
TARGET, LOGS = FIX / "tiny-llama" / "target", FIX / "open_unlearning" / "retain_TOFU_EVAL.json"

HANDLERS = '''
import numpy as np
import torch
from scipy.stats import ks_2samp

from evaldag.metrics.unlearning.open_unlearning_compat import logger, unlearning_metric


@unlearning_metric(name="my_ks_test")
def my_ks_test(model, **kwargs):
    forget = [v["score"] for v in kwargs["pre_compute"]["forget"]["value_by_index"].values()]
    logs = kwargs.get("reference_logs")
    if not logs:
        logger.warning("no retain logs")
        return {"agg_value": None}
    retain = [v["score"] for v in logs["retain_model_logs"]["retain"]["value_by_index"].values()]
    return {"agg_value": ks_2samp(np.array(forget), np.array(retain)).pvalue}


@unlearning_metric(name="answer_words")
def answer_words(model, **kwargs):
    words = {str(r["index"]): {"words": len(r["answer"].split())} for r in kwargs["data"]}
    return {"agg_value": float(np.mean([w["words"] for w in words.values()])), "value_by_index": words}


@unlearning_metric(name="doubled")
def doubled(model, **kwargs):
    return {"agg_value": 2 * kwargs["pre_compute"]["x"]["agg_value"]}


@unlearning_metric(name="question_nll")
def question_nll(model, **kwargs):
    tok, coll, bs = kwargs["tokenizer"], kwargs["collators"], kwargs["batch_size"]
    items = [{"input_ids": tok(r["question"]).input_ids, "index": r["index"]} for r in kwargs["data"]]
    for it in items:
        it["labels"] = list(it["input_ids"])
    by_index = {}
    for s in range(0, len(items), bs):
        b = coll(items[s:s + bs])
        with torch.no_grad():
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        lp = torch.log_softmax(logits[:, :-1].float(), -1)
        lab = b["labels"][:, 1:]
        mask = lab != -100
        nll = -lp.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
        for i, n, m in zip(b["index"].tolist(), nll.sum(-1).tolist(), mask.sum(-1).tolist()):
            by_index[str(i)] = {"nll": n / m}
    return {"agg_value": float(np.mean([v["nll"] for v in by_index.values()])), "value_by_index": by_index}
'''

FQ = '''# @package eval.tofu.metrics.my_forget_quality
defaults:
  - .@pre_compute.forget_truth_ratio: forget_Truth_Ratio

reference_logs:
  retain_model_logs:
    path: ${eval.tofu.retain_logs_path}
    include:
      forget_truth_ratio:
        access_key: retain

pre_compute:
  forget_truth_ratio:
    access_key: forget

handler: my_ks_test
'''

NLL = '''# @package eval.tofu.metrics.forget_question_nll
defaults:
  - ../../data/datasets@datasets: TOFU_QA_forget
  - ../../collator@collators: DataCollatorForSupervisedDatasetwithIndex
handler: question_nll
batch_size: ${eval.tofu.batch_size}
datasets:
  TOFU_QA_forget:
    args:
      hf_args:
        name: ${eval.tofu.forget_split}_perturbed
'''

WORDS = """# @package eval.tofu.metrics.forget_answer_words
defaults:
  - ../../data/datasets@datasets: TOFU_QA_forget
handler: answer_words
"""


def _files(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, text in (("handlers.py", HANDLERS), ("my_fq.yaml", FQ), ("nll.yaml", NLL), ("words.yaml", WORDS)):
        (folder / name).write_text(text)
        out[name] = folder / name
    return out


def _run(tmp: Path, out: str, *extra: str) -> int:
    data = tmp / "tofu" if (tmp / "tofu").is_dir() else _trimmed(tmp / "tofu")
    return main(["run", "tofu", "--model", str(TARGET), "--data", str(data), "--out", str(tmp / out),
                 "--cache-dir", str(tmp / "cache"), "--quiet", *extra])


ROWS = 8  # rows per TOFU subset: the checks are per row, and 40 rows only cost time


def _trimmed(folder: Path) -> Path:
    """tofu_tiny with its first ROWS rows per subset (the same files, fewer lines)."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in (FIX / "tofu_tiny").iterdir():
        lines = f.read_text().splitlines(keepends=True)
        (folder / f.name).write_text("".join(lines if f.suffix != ".json" else lines[:ROWS]))
    return folder


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ou")
    f = _files(tmp / "user")
    # the config before the file that registers its handler: .py files are read first
    code = _run(tmp, "out", "--metrics", "forget_quality", "--retain-logs", str(LOGS), "--add-metric", str(f["my_fq.yaml"]),
                "--add-metric", str(f["handlers.py"]), "--add-metric", str(f["nll.yaml"]), "--add-metric", str(f["words.yaml"]))
    assert code == 0
    return tmp, f


def _eval(folder: Path) -> dict:
    return json.loads((folder / "TOFU_EVAL.json").read_text())


def test_an_aggregator_config_as_written_gives_ks_test_of_the_runs_truth_ratios(cold):
    from scipy.stats import ks_2samp

    tmp, _ = cold
    ev = _eval(tmp / "out")
    model = [v["score"] for v in ev["forget_truth_ratio"]["value_by_index"].values()]
    retain = [v["score"] for v in json.loads(LOGS.read_text())["forget_truth_ratio"]["value_by_index"].values()]
    want = ks_2samp(np.array(model), np.array(retain)).pvalue
    assert ev["my_forget_quality"] == {"agg_value": pytest.approx(want, rel=1e-12)}
    assert ev["my_forget_quality"]["agg_value"] == ev["forget_quality"]["agg_value"]  # the built-in, same numbers
    summary = json.loads((tmp / "out" / "TOFU_SUMMARY.json").read_text())
    assert summary["my_forget_quality"] == ev["my_forget_quality"]["agg_value"]  # where open-unlearning's users look
    assert not (tmp / "out" / "RUN_EVAL.json").exists()


def test_a_model_calling_handler_gets_the_model_tokenizer_rows_and_a_padding_collator(cold):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp, _ = cold
    got = _eval(tmp / "out")["forget_question_nll"]
    tok = AutoTokenizer.from_pretrained(TARGET)
    model = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    rows = [json.loads(line) for line in (tmp / "tofu" / "forget10_perturbed.json").read_text().splitlines() if line]
    want = {}
    for i, row in enumerate(rows):  # one row at a time: no padding at all
        ids = torch.tensor([tok(row["question"]).input_ids])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        want[str(i)] = float(-lp.gather(-1, ids[0, 1:, None]).mean())
    assert sorted(got["value_by_index"], key=int) == [str(i) for i in range(ROWS)]  # every row, by its position
    assert {k: v["nll"] for k, v in got["value_by_index"].items()} == pytest.approx(want, rel=1e-4)
    assert got["agg_value"] == pytest.approx(np.mean(list(want.values())), rel=1e-4)
    nodes = json.loads((tmp / "out" / "run.json").read_text())["nodes"]
    assert nodes["forget_question_nll"]["backend"] == {"model": f"hf:{TARGET}"}  # its record: served by the hf model


def test_an_aggregator_reads_the_rows_its_config_names_without_a_model(cold):
    tmp, _ = cold
    got = _eval(tmp / "out")["forget_answer_words"]
    rows = [json.loads(line) for line in (tmp / "tofu" / "forget10_perturbed.json").read_text().splitlines() if line]
    assert got["value_by_index"] == {str(i): {"words": len(r["answer"].split())} for i, r in enumerate(rows)}
    assert got["agg_value"] == pytest.approx(np.mean([len(r["answer"].split()) for r in rows]))
    nodes = json.loads((tmp / "out" / "run.json").read_text())["nodes"]
    assert nodes["forget_answer_words"]["kind"] == "aggregator" and "backend" not in nodes["forget_answer_words"]


def test_a_literal_logs_path_and_a_parent_that_is_another_config(cold):
    tmp, f = cold
    literal = tmp / "user" / "literal.yaml"
    literal.write_text(FQ.replace("my_forget_quality", "fq_literal").replace("${eval.tofu.retain_logs_path}", str(LOGS)))
    chain = tmp / "user" / "chain.yaml"  # a parent by the NAME of a config added before it
    chain.write_text("# @package eval.tofu.metrics.twice_words\ndefaults:\n  - .@pre_compute.forget_answer_words: x\n"
                     "pre_compute:\n  forget_answer_words:\n    access_key: x\nhandler: doubled\n")
    code = _run(tmp, "more", "--metrics", "forget_truth_ratio", "--add-metric", str(f["handlers.py"]), "--add-metric",
                str(literal), "--add-metric", str(f["words.yaml"]), "--add-metric", str(chain))
    assert code == 0
    ev, first = _eval(tmp / "more"), _eval(tmp / "out")
    assert ev["fq_literal"] == first["my_forget_quality"]  # the file named in the config, without --retain-logs
    assert ev["twice_words"]["agg_value"] == 2 * first["forget_answer_words"]["agg_value"]


def test_a_cached_rerun_never_loads_the_model(cold, monkeypatch):
    from evaldag.engine.adapters.hf import HFModel

    tmp, f = cold

    def refuse(self):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(HFModel, "load", refuse)
    code = _run(tmp, "again", "--metrics", "forget_quality", "--retain-logs", str(LOGS), "--add-metric", str(f["handlers.py"]),
                "--add-metric", str(f["my_fq.yaml"]), "--add-metric", str(f["nll.yaml"]), "--add-metric", str(f["words.yaml"]))
    assert code == 0
    nodes = json.loads((tmp / "again" / "run.json").read_text())["nodes"]
    assert {n["status"] for n in nodes.values()} == {"cached"}
    assert _eval(tmp / "again") == _eval(tmp / "out")


def test_an_edited_handler_is_recomputed_and_a_null_value_says_why(cold):
    tmp, f = cold
    edited = tmp / "edited"
    shutil.copytree(tmp / "user", edited)
    (edited / "handlers.py").write_text(HANDLERS.replace("logger.warning(\"no retain logs\")", "pass"))
    code = _run(tmp, "edited", "--metrics", "forget_truth_ratio", "--retain-logs", str(LOGS),
                "--add-metric", str(edited / "handlers.py"), "--add-metric", str(edited / "my_fq.yaml"))
    nodes = json.loads((tmp / "edited" / "run.json").read_text())["nodes"]
    assert code == 0 and nodes["my_forget_quality"]["status"] == "computed"  # its source is in its fingerprint
    assert nodes["my_forget_quality"]["reason"] == "params" and nodes["forget_truth_ratio"]["status"] == "cached"
    # no --retain-logs: open-unlearning skips the log (path null); the handler returns None -> null with a reason
    code = _run(tmp, "nologs", "--metrics", "forget_truth_ratio", "--add-metric", str(edited / "handlers.py"),
                "--add-metric", str(edited / "my_fq.yaml"))
    assert code == 0
    entry = _eval(tmp / "nologs")["my_forget_quality"]
    assert entry["agg_value"] is None and "returned agg_value None" in entry["reason"]
    nodes = json.loads((tmp / "nologs" / "run.json").read_text())["nodes"]
    assert nodes["my_forget_quality"]["status"] == "computed" and nodes["forget_truth_ratio"]["status"] == "cached"


@pytest.mark.parametrize("case,text,message", [
    ("clash", FQ.replace("my_forget_quality", "forget_quality"),
     "'forget_quality' is a built-in TOFU metric; a config of that name would replace its results"),
    ("handler", FQ.replace("handler: my_ks_test", "handler: nope"), "no open-unlearning handler 'nope' is registered"),
    ("package", FQ.split("\n", 1)[1], "no `# @package eval.<bench>.metrics.<NAME>` line"),
    ("parent", FQ.replace(".@pre_compute.forget_truth_ratio", ".@pre_compute.forget_nope").replace(
        "  forget_truth_ratio:\n    access_key: forget", "  forget_nope:\n    access_key: forget"),
     "pre_compute.forget_nope: no TOFU metric of that name"),
    ("interpolation", NLL.replace("${eval.tofu.batch_size}", "${eval.tofu.nope}"), "batch_size: cannot resolve ${eval.tofu.nope}"),
    ("bench", FQ.replace("eval.tofu.", "eval.muse."), "no benchmark of this run (tofu) reads this config"),
    ("shape", FQ.replace("reference_logs:\n  retain_model_logs:", "reference_logs: [1]\nnot_logs:\n  retain_model_logs:"),
     "reference_logs: expected a mapping, not list"),
])
def test_a_bad_config_is_refused_in_one_line_before_anything_runs(tmp_path, capsys, case, text, message):
    f = _files(tmp_path / "user")
    (tmp_path / "bad.yaml").write_text(text)
    code = _run(tmp_path, "out", "--metrics", "forget_Q_A_Prob", "--add-metric", str(f["handlers.py"]),
                "--add-metric", str(tmp_path / "bad.yaml"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("evaldag: error: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_the_planner_refuses_a_model_calling_handler_on_another_backend():
    from evaldag.engine import Graph, Rows
    from evaldag.engine.adapters.toy import ToyModel
    from evaldag.engine.planner import PlanError, plan
    from evaldag.engine.resources import ResourceSet
    from evaldag.metrics.unlearning.open_unlearning_compat import handler_node, unlearning_metric

    @unlearning_metric(name="calls_it")
    def calls_it(model, **kwargs):
        return {"agg_value": float(model.config.vocab_size)}

    node = handler_node("vocab", "TOFU", calls_it, {}, {}, {}, data="tofu_forget")
    with pytest.raises(PlanError) as e:
        plan(Graph([node]), ResourceSet({"model": ToyModel(), "tofu_forget": Rows(lambda: [{"q": 1}], "x")}))
    assert str(e.value) == (
        "vocab needs a loaded Hugging Face model to hand to an open-unlearning handler that calls `model` (such a "
        f"handler runs only on an hf: model); toy:0 gives {ToyModel().capabilities().gives()}: drop it, or add --model-arg fallback=hf:DIR")


def test_a_handler_that_reads_only_pre_compute_is_an_aggregator():
    from evaldag.metrics.unlearning.open_unlearning_compat import calls_model

    def agg(model, **kwargs):
        return {"agg_value": kwargs["pre_compute"]["x"]["agg_value"]}

    def calls(model, **kwargs):
        return {"agg_value": len(list(model.parameters()))}

    assert not calls_model(agg) and calls_model(calls)


def test_the_padding_collator_pads_as_open_unlearnings_does():
    from evaldag.metrics.unlearning.open_unlearning_compat_hf import PaddingCollator

    class Tok:
        pad_token_id, eos_token_id = 0, 2

    items = [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7], "index": 3}, {"input_ids": [8, 0], "labels": [8, 0], "index": 4}]
    right = PaddingCollator(Tok())(items)
    assert right["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert right["labels"].tolist() == [[-100, 6, 7], [8, 0, -100]]
    assert right["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]  # a real pad-id token is masked too, as there
    assert right["index"].tolist() == [3, 4]
    left = PaddingCollator(Tok(), padding_side="left")(items)
    assert left["input_ids"].tolist() == [[5, 6, 7], [0, 8, 0]] and left["labels"].tolist() == [[-100, 6, 7], [-100, 8, 0]]


def test_the_one_dispatch_rule(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("m.py", "c.yaml", "c.yml", "notes.txt"):
        (tmp_path / name).write_text("")
    assert classify("m.py") == ("py", "m.py", "", "")
    assert classify("m.py:rows_seen@holdout") == ("py", "m.py", "rows_seen", "holdout")
    assert classify("c.yaml") == ("config", "c.yaml", "", "") and classify("c.yml")[0] == "config"
    assert classify("exact_memorization@holdout") == ("name", "exact_memorization", "", "holdout")
    for arg, message in (("missing.py", "no such file: missing.py"), ("./x/c.yaml", "no such file: ./x/c.yaml"),
                         ("c.yaml:NAME", "a config file takes no :NAME or @SPLIT"),
                         ("notes.txt", "notes.txt is neither a Python file (.py) nor a config (.yaml, .yml)")):
        with pytest.raises(ValueError, match=".*" + message.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
            classify(arg)
    with pytest.raises(SystemExit):
        main(["run", "tofu", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "An argument naming an existing file is a file, anything else a registered metric name" in text
    assert "results land in OUT/RUN_EVAL.json" in text and "in OUT/<BENCH>_EVAL.json / <BENCH>_SUMMARY.json under NAME" in text


def test_a_handler_from_an_installed_package_is_found_by_name(tmp_path, monkeypatch):
    """A package registers its handlers on import through an ``evaldag.metrics`` entry point."""
    import sys

    from ..plugins import install

    from evaldag.engine.declare import REGISTRY
    from evaldag.metrics.unlearning.open_unlearning_compat import HANDLERS, find_handler

    source = ("from evaldag.metrics.unlearning.open_unlearning_compat import unlearning_metric\n\n\n"
              "@unlearning_metric(name='installed_mean')\ndef installed_mean(model, **kwargs):\n"
              "    return {'agg_value': sum(v['agg_value'] for v in kwargs['pre_compute'].values())}\n")
    site = tmp_path / "site"
    install(site, "ouhandlers", {"ouhandlers.py": source}, "[evaldag.metrics]\nouhandlers = ouhandlers\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(REGISTRY, "_loaded_entry_points", False)
    monkeypatch.delitem(HANDLERS, "installed_mean", raising=False)
    monkeypatch.delitem(sys.modules, "ouhandlers", raising=False)
    h = find_handler("installed_mean")
    assert h is not None and h.fn.__module__ == "ouhandlers" and not h.calls_model
    assert h(None, pre_compute={"a": {"agg_value": 1.5}, "b": {"agg_value": 2.0}}) == {"agg_value": 3.5}
    HANDLERS.pop("installed_mean", None)


def test_two_configs_of_one_name_are_refused(tmp_path, capsys):
    f = _files(tmp_path / "user")
    (tmp_path / "again.yaml").write_text(FQ)
    code = _run(tmp_path, "out", "--metrics", "forget_Q_A_Prob", "--add-metric", str(f["handlers.py"]),
                "--add-metric", str(f["my_fq.yaml"]), "--add-metric", str(tmp_path / "again.yaml"))
    err = capsys.readouterr().err
    assert code == 2 and err == (f"evaldag: error: --add-metric {tmp_path / 'again.yaml'}: 'my_forget_quality' is already "
                                 "added by another --add-metric config\n")
    assert not (tmp_path / "out").exists()
