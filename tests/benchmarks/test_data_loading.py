"""TOFU / MUSE data loading: formats, validation errors, templates, retain logs."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from evaldag.benchmarks.muse import data as muse
from evaldag.benchmarks.tofu import data as tofu
from evaldag.benchmarks.unlearning import eval_logs
from evaldag.benchmarks.template_args import load_template_args
from evaldag.benchmarks.textfile import DataError
from evaldag.engine.adapters.base import PromptTemplate

FIX = Path(__file__).parents[1] / "fixtures"
TOFU_DIR, MUSE_DIR = FIX / "tofu_tiny", FIX / "muse_tiny"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_lines(path: Path, rows: list) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# ------------------------------------------------------------------ TOFU subsets


def test_load_tofu_fixture_sizes_order_and_fields():
    d = tofu.load_tofu(TOFU_DIR)
    assert {k: len(v) for k, v in d.items()} == {
        "forget": 40, "holdout": 40, "retain": 40, "real_authors": 20, "world_facts": 24}
    assert d["forget"] == _lines(TOFU_DIR / "forget10_perturbed.json")  # file order = row index
    assert len(d["forget"][0]["perturbed_answer"]) == 5 and "paraphrased_question" in d["forget"][0]
    assert len(d["world_facts"][0]["perturbed_answer"]) == 3


def test_split_names_and_row_kinds():
    assert tofu.tofu_splits("forget01") == {
        "forget": "forget01_perturbed", "holdout": "holdout01", "retain": "retain_perturbed",
        "real_authors": "real_authors_perturbed", "world_facts": "world_facts_perturbed"}
    assert tofu.tofu_splits("forget05", "holdout10")["holdout"] == "holdout10"
    with pytest.raises(DataError, match="forget_split"):
        tofu.tofu_splits("forget_10")
    assert [tofu.row_kind(s) for s in ("forget05_perturbed", "retain_perturbed", "world_facts_perturbed", "holdout10")] == [
        "perturbed", "perturbed", "options", "qa"]


def test_json_array_jsonl_and_json_lines_give_the_same_rows(tmp_path):
    rows = _lines(TOFU_DIR / "holdout10.json")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (tmp_path / "a" / "holdout10.json").write_text(json.dumps(rows, indent=2))
    _write_lines(tmp_path / "b" / "holdout10.jsonl", rows)
    assert tofu.load_subset(tmp_path / "a", "holdout10") == rows
    assert tofu.load_subset(tmp_path / "b", "holdout10") == rows


def test_parquet_needs_pyarrow_or_reads(tmp_path):
    rows = _lines(TOFU_DIR / "holdout10.json")
    if importlib.util.find_spec("pyarrow") is None:
        (tmp_path / "holdout10.parquet").write_bytes(b"PAR1")
        with pytest.raises(DataError, match="pyarrow"):
            tofu.load_subset(tmp_path, "holdout10")
    else:  # pragma: no cover - only where pyarrow is installed
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "holdout10.parquet")
        assert tofu.load_subset(tmp_path, "holdout10") == rows


def test_missing_ambiguous_and_wrong_sources(tmp_path):
    with pytest.raises(DataError, match=r"no forget10_perturbed\.json"):
        tofu.load_subset(tmp_path, "forget10_perturbed")
    _write_lines(tmp_path / "holdout10.json", [{"question": "q", "answer": "a"}])
    _write_lines(tmp_path / "holdout10.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(DataError, match="ambiguous"):
        tofu.load_subset(tmp_path, "holdout10")
    with pytest.raises(DataError, match="got a file"):
        tofu.load_subset(tmp_path / "holdout10.json", "holdout10")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "holdout10.json").write_text("")
    with pytest.raises(DataError, match="no rows"):
        tofu.load_subset(tmp_path / "e", "holdout10")


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="datasets is installed")
def test_hub_id_without_datasets_is_a_clear_error():
    with pytest.raises(DataError, match="`datasets`"):
        tofu.load_subset("locuslab/TOFU-does-not-exist-locally", "forget10_perturbed")


@pytest.mark.parametrize(
    "row, field, message",
    [
        ({"answer": "a", "paraphrased_answer": "p", "perturbed_answer": ["x"]}, "question", "missing"),
        ({"question": "", "answer": "a", "paraphrased_answer": "p", "perturbed_answer": ["x"]}, "question", "at least 1"),
        ({"question": "q", "answer": 3, "paraphrased_answer": "p", "perturbed_answer": ["x"]}, "answer", "string"),
        ({"question": "q", "answer": "a", "perturbed_answer": ["x"]}, "paraphrased_answer", "missing"),
        ({"question": "q", "answer": "a", "paraphrased_answer": "p", "perturbed_answer": []}, "perturbed_answer", "at least 1"),
        ({"question": "q", "answer": "a", "paraphrased_answer": "p", "perturbed_answer": "x"}, "perturbed_answer", "list"),
        ({"question": "q", "answer": "a", "paraphrased_answer": "p", "perturbed_answer": ["x", 2]}, "perturbed_answer.1", "string"),
    ],
)
def test_bad_rows_name_file_row_and_field(tmp_path, row, field, message):
    good = _lines(TOFU_DIR / "forget10_perturbed.json")[:3]
    path = tmp_path / "forget10_perturbed.json"
    _write_lines(path, good[:2] + [row] + good[2:])
    with pytest.raises(DataError) as err:
        tofu.load_subset(tmp_path, "forget10_perturbed")
    text = str(err.value)
    assert str(path) in text and "row 2" in text and f"'{field}'" in text and message in text


def test_bad_json_and_non_object_rows(tmp_path):
    (tmp_path / "holdout10.json").write_text('{"question": "q", "answer": "a"}\n{"question": \n')
    with pytest.raises(DataError, match=r"line 2 \(row 1, 0-based\)"):
        tofu.load_subset(tmp_path, "holdout10")
    (tmp_path / "holdout10.json").write_text('[{"question": "q", "answer": "a"}, ["not", "a", "row"]]')
    with pytest.raises(DataError, match=r"row 1 \(0-based\) is a list"):
        tofu.load_subset(tmp_path, "holdout10")


def test_kind_override(tmp_path):
    _write_lines(tmp_path / "mine.json", [{"question": "q", "answer": "a"}])
    assert tofu.load_subset(tmp_path, "mine") == [{"question": "q", "answer": "a"}]
    with pytest.raises(DataError, match="perturbed_answer"):
        tofu.load_subset(tmp_path, "mine", kind="options")


# ------------------------------------------------------------------ template args

PHI = 'model_args:\n  pretrained_model_name_or_path: "microsoft/phi-1_5"\ntemplate_args:\n  apply_chat_template: False\n  user_start_tag: "Question: "\n  user_end_tag: "\\n"\n  asst_start_tag: "Answer: "\n  asst_end_tag: "\\n\\n"\n'
LLAMA = """template_args:
  apply_chat_template: True
  system_prompt: You are a helpful assistant.
  system_prompt_with_special_tokens: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\nYou are a helpful assistant.<|eot_id|>"
  user_start_tag: "<|start_header_id|>user<|end_header_id|>\\n\\n"
  user_end_tag: "<|eot_id|>"
  asst_start_tag: "<|start_header_id|>assistant<|end_header_id|>\\n\\n"
  asst_end_tag: "<|eot_id|>"
  date_string: 10 Apr 2025
"""


def test_template_args_from_model_configs_and_bare_mappings(tmp_path):
    (tmp_path / "phi.yaml").write_text(PHI)
    assert load_template_args(tmp_path / "phi.yaml") == PromptTemplate.plain()
    (tmp_path / "llama.yaml").write_text(LLAMA)
    t = load_template_args(tmp_path / "llama.yaml")
    assert t.apply_chat_template and t.date_string == "10 Apr 2025" and t.user_end_tag == "<|eot_id|>"
    assert t.system_prompt_with_special_tokens.endswith("assistant.<|eot_id|>")
    (tmp_path / "bare.json").write_text(json.dumps({"apply_chat_template": True, "system_prompt": "Hi"}))
    assert load_template_args(tmp_path / "bare.json") == PromptTemplate.chat(system_prompt="Hi")


@pytest.mark.parametrize(
    "text, match",
    [
        ("template_args:\n  apply_chat_template: false\n  assistant_tag: x\n", r"unknown template keys \['assistant_tag'\]"),
        ("model_args:\n  a: 1\ntokenizer_args:\n  b: 2\n", "template_args:"),
        ("template_args:\n  user_start_tag: ${oc.env:TAG}\n", "interpolation"),
        ("template_args:\n  apply_chat_template: maybe\n", "apply_chat_template"),
        ("- just\n- a list\n", "mapping"),
        ("template_args: [1, 2]\n", "mapping"),
        ("template_args: {\n", "cannot read"),
    ],
)
def test_template_args_errors(tmp_path, text, match):
    (tmp_path / "m.yaml").write_text(text)
    with pytest.raises(DataError, match=match):
        load_template_args(tmp_path / "m.yaml")


# ------------------------------------------------------------------ retain logs


def test_eval_logs_from_open_unlearning():
    logs = eval_logs.load_eval_logs(FIX / "open_unlearning" / "retain_TOFU_EVAL.json")
    raw = json.loads((FIX / "open_unlearning" / "retain_TOFU_EVAL.json").read_text())
    assert logs.mia_min_k_auc == raw["mia_min_k"]["agg_value"]
    assert list(logs.forget_truth_ratio) == [str(i) for i in range(40)]
    assert logs.forget_truth_ratio["3"] == raw["forget_truth_ratio"]["value_by_index"]["3"]["score"]
    m = muse.load_eval_logs(FIX / "open_unlearning" / "retain_MUSE_EVAL.json")  # MUSE logs hold no truth ratio
    assert m.mia_min_k_auc == pytest.approx(0.455) and m.forget_truth_ratio is None
    with pytest.raises(DataError, match="forget_truth_ratio.value_by_index"):
        eval_logs.load_eval_logs(FIX / "open_unlearning" / "retain_MUSE_EVAL.json")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d.pop("mia_min_k"), r"'mia_min_k.agg_value'.*privleak"),
        (lambda d: d["mia_min_k"].pop("agg_value"), "mia_min_k.agg_value"),
        (lambda d: d["mia_min_k"].update(agg_value="0.4"), r"mia_min_k.agg_value is '0.4', expected an AUC"),
        (lambda d: d["forget_truth_ratio"].pop("value_by_index"), r"forget_truth_ratio.value_by_index.*forget_quality"),
        (lambda d: d["forget_truth_ratio"]["value_by_index"].update({"0": {"score": "x"}}), r"value_by_index\['0'\].score is 'x'"),
    ],
)
def test_eval_logs_missing_keys(tmp_path, edit, match):
    d = json.loads((FIX / "open_unlearning" / "retain_TOFU_EVAL.json").read_text())
    edit(d)
    (tmp_path / "TOFU_EVAL.json").write_text(json.dumps(d))
    with pytest.raises(DataError, match=match):
        eval_logs.load_eval_logs(tmp_path / "TOFU_EVAL.json")


def test_eval_logs_unreadable(tmp_path):
    with pytest.raises(DataError, match="not found"):
        eval_logs.load_eval_logs(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DataError, match="not valid JSON"):
        eval_logs.load_eval_logs(tmp_path / "bad.json")


# ------------------------------------------------------------------ MUSE


def test_load_muse_fixture():
    d = muse.load_muse(MUSE_DIR)
    assert {k: len(v) for k, v in d.items()} == {
        "verbmem_forget": 8, "knowmem_forget_qa": 20, "knowmem_retain_qa": 20, "knowmem_forget_qa_icl": 2,
        "knowmem_retain_qa_icl": 2, "privleak_forget": 20, "privleak_holdout": 20}
    assert muse.fewshot_pairs(d["knowmem_forget_qa_icl"])[0] == (
        "Where was the author Pella Ilves born?", "Pella Ilves was born in the city of Kraków.")
    assert len(muse.load_muse_split(MUSE_DIR, "privleak", "retain")) == 20


def test_muse_errors(tmp_path):
    with pytest.raises(DataError, match="unknown MUSE config"):
        muse.load_muse_split(MUSE_DIR, "verbatim", "forget")
    with pytest.raises(DataError, match="no split 'retain'"):
        muse.load_muse_split(MUSE_DIR, "verbmem", "retain")
    shutil.copy(MUSE_DIR / "verbmem_forget.json", tmp_path / "verbmem_forget.json")
    rows = _lines(tmp_path / "verbmem_forget.json")
    del rows[5]["prompt"]
    _write_lines(tmp_path / "verbmem_forget.json", rows)
    with pytest.raises(DataError, match=r"verbmem_forget\.json: row 5 \(0-based\), field 'prompt'"):
        muse.load_muse_split(tmp_path, "verbmem", "forget")
    _write_lines(tmp_path / "privleak_holdout.jsonl", [{"text": "ok"}, {"text": ""}])
    with pytest.raises(DataError, match=r"row 1 \(0-based\), field 'text'"):
        muse.load_muse_split(tmp_path, "privleak", "holdout")


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    """Files saved by editors that write a BOM read the same rows (JSON lines, JSON array, query files)."""
    rows = _lines(TOFU_DIR / "holdout10.json")
    for sub, text in (("lines", "".join(json.dumps(r) + "\n" for r in rows)), ("array", json.dumps(rows))):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "holdout10.json").write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
        assert tofu.load_subset(tmp_path / sub, "holdout10") == rows
    from evaldag.benchmarks.weat import spec

    queries = spec.WORD_SETS.read_bytes()
    (tmp_path / "q.json").write_bytes(b"\xef\xbb\xbf" + queries)
    assert list(spec.load_queries(tmp_path / "q.json")) == list(json.loads(queries))
