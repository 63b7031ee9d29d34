"""Hostile data files: each is refused in one line naming where.

* bytes that are not UTF-8, in every reader of text files: file, line, column, byte;
* an empty or whitespace-only field a metric scores (an empty paraphrase turned one
  row's truth ratio from 0.45 into 1.8 million): file, row, field;
* retain logs of the wrong shape or out of range: file and key.

Through the CLI each is exit 2, one ``evaldag: error:`` line, no output folder, and no
model loaded (loading is patched to fail loudly).
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest

from evaldag.benchmarks.editing import data as editing
from evaldag.benchmarks.muse import data as muse
from evaldag.benchmarks.probes import data as probes
from evaldag.benchmarks.textfile import NotUTF8, read_utf8
from evaldag.benchmarks.tofu import data as tofu
from evaldag.benchmarks.unlearning import eval_logs
from evaldag.benchmarks.template_args import load_template_args
from evaldag.benchmarks.textfile import DataError
from evaldag.benchmarks.weat.spec import load_queries
from evaldag.engine import cli
from evaldag.metrics.fairness.embeddings import load_word2vec_text
from evaldag.metrics.fairness.vectors import EmbeddingFormatError
from evaldag.metrics.unlearning.forget_quality import forget_quality
from evaldag.metrics.unlearning.privleak import privleak

FIX = Path(__file__).parents[1] / "fixtures"
TARGET = FIX / "tiny-llama" / "target"
LOGS = FIX / "open_unlearning" / "retain_TOFU_EVAL.json"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_rows(path: Path, rows: list) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _latin1_line(path: Path, line: int, old: str, new: str) -> tuple[int, int]:
    """Replace ``old`` with ``new`` (written as Latin-1) on 1-based ``line``; the bad
    byte's (offset, column), counted by hand from the file's bytes."""
    lines = path.read_bytes().split(b"\n")
    before = lines[line - 1].index(old.encode())
    lines[line - 1] = lines[line - 1].replace(old.encode(), new.encode("latin-1"), 1)
    path.write_bytes(b"\n".join(lines))
    offset = sum(len(x) + 1 for x in lines[: line - 1]) + before + new.index("é")
    return offset, before + new.index("é") + 1


# ------------------------------------------------------------------ item 10: not UTF-8


def test_jsonl_row_names_file_line_row_column_and_byte(tmp_path):
    shutil.copytree(FIX / "tofu_tiny", tmp_path / "d")
    path = tmp_path / "d" / "forget10_perturbed.json"
    rows = _rows(path)
    rows[2]["answer"] = "Dara Ilves was born in Cusco."
    _write_rows(path, rows)
    text = path.read_text().split("\n")
    path.write_text("\n".join(text[:2] + [" "] + text[2:]))  # a blank line: line 4 holds row 2
    offset, column = _latin1_line(path, 4, "Cusco.", "Cusc\xe9.")
    with pytest.raises(NotUTF8) as err:
        tofu.load_subset(tmp_path / "d", "forget10_perturbed")
    assert str(err.value) == (f"{path}: line 4 (row 2, 0-based), column {column}: byte 0xe9 is not UTF-8 "
                              f"(byte offset {offset}: invalid continuation byte); save the file as UTF-8")
    assert isinstance(err.value, ValueError)  # the CLI's one-line path


def test_json_array_and_bom_count_lines_and_offsets_in_the_file(tmp_path):
    path = tmp_path / "holdout10.json"
    path.write_bytes(b"\xef\xbb\xbf[\n" + b'{"question": "q", "answer": "a"},\n' + b'{"question": "caf\xe9", "answer": "a"}]\n')
    with pytest.raises(NotUTF8) as err:
        tofu.load_subset(tmp_path, "holdout10")
    # line 3, column 18 (after the 17 characters of '{"question": "caf'); offset 3 (BOM) + 2 + 34 + 17 = 56
    assert str(err.value).startswith(f"{path}: line 3, column 18: byte 0xe9 is not UTF-8 (byte offset 56: ")


def test_a_truncated_multibyte_character_is_named(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes("ok\nna\u00efve".encode()[:-3])  # cut inside 'ï' (c3 af): 'na\xc3' at the end
    with pytest.raises(NotUTF8, match=r"x\.txt: line 2, column 3: byte 0xc3 is not UTF-8 \(byte offset 5: unexpected end of data\)"):
        read_utf8(path)


def _latin1(path: Path, text: str) -> None:
    path.write_bytes(text.encode("latin-1"))


def test_every_text_reader_names_the_file_and_line(tmp_path):
    """MUSE rows, template args, retain logs, edits, texts, WEAT queries, probe data (plain and gzipped)."""
    shutil.copytree(FIX / "muse_tiny", tmp_path / "muse")
    verbmem = tmp_path / "muse" / "verbmem_forget.json"
    _latin1_line(verbmem, 3, "Nessa", "N\xe9ssa")
    yaml = tmp_path / "model.yaml"
    _latin1(yaml, "template_args:\n  question_start_tag: 'Qu\xe9stion: '\n")
    logs = tmp_path / "TOFU_EVAL.json"
    logs.write_bytes(LOGS.read_bytes().replace(b'"exact', b'"\xe9xact', 1))  # line 2: '    "exact_memorization"'
    edits = tmp_path / "edits.jsonl"
    _latin1(edits, json.dumps({"prompt": "a", "subject": "a", "target_true": "b", "target_new": "c"}) + "\n" + '{"prompt": "\xe9"}\n')
    texts = tmp_path / "texts.txt"
    _latin1(texts, "one\n\ntw\xe9\n")
    queries = tmp_path / "queries.json"
    _latin1(queries, '{\n "q": {"target_sets": [["caf\xe9"]]}}')
    probe = tmp_path / "isear" / "isear.csv"
    probe.parent.mkdir()
    _latin1(probe, "a\nb\n\xe9\n")
    gz = tmp_path / "events.txt.gz"
    gz.write_bytes(gzip.compress("x\n\xe9".encode("latin-1")))
    cases = [
        (lambda: muse.load_muse_split(tmp_path / "muse", "verbmem", "forget"), f"{verbmem}: line 3 (row 2, 0-based), column 14"),
        (lambda: load_template_args(yaml), f"{yaml}: line 2, column 26"),
        (lambda: eval_logs.load_eval_logs(logs), f"{logs}: line 2, column 6"),
        (lambda: editing.load_edits(edits), f"{edits}: line 2 (row 1, 0-based), column 13"),
        (lambda: editing.load_texts(texts), f"{texts}: line 3 (row 1, 0-based), column 3"),
        (lambda: load_queries(queries), f"{queries}: line 2, column 29"),
        (lambda: probes.read_text(probe), f"{probe}: line 3, column 1"),
        (lambda: probes.read_text(gz), f"{gz}: line 2, column 1"),
    ]
    for load, where in cases:
        with pytest.raises(ValueError) as err:
            load()
        assert str(err.value).startswith(where + ": byte 0xe9 is not UTF-8"), str(err.value)


def test_embedding_text_names_line_column_and_byte(tmp_path):
    path = tmp_path / "vectors.txt"
    _latin1(path, "2 2\ncat 0.1 0.2\ncaf\xe9 0.3 0.4\n")
    with pytest.raises(EmbeddingFormatError) as err:
        load_word2vec_text(path)
    assert str(err.value) == f"{path}:3: byte 0xe9 at column 4 is not UTF-8 (invalid continuation byte); save the file as UTF-8"


# ------------------------------------------------------------------ item 11: empty scored fields


def _perturbed_row(**change) -> dict:
    row = {"question": "q", "answer": "a", "paraphrased_answer": "p", "perturbed_answer": ["x", "y"]}
    return {**row, **change}


@pytest.mark.parametrize("change, field, shown", [
    ({"paraphrased_answer": ""}, "paraphrased_answer", "''"),
    ({"paraphrased_answer": "  \n\t"}, "paraphrased_answer", "'  \\n\\t'"),
    ({"perturbed_answer": ["x", ""]}, "perturbed_answer.1", "''"),
    ({"perturbed_answer": [" ", "y"]}, "perturbed_answer.0", "' '"),
    ({"answer": " "}, "answer", "' '"),
    ({"question": "\n"}, "question", "'\\n'"),
])
def test_blank_scored_fields_are_refused_like_an_empty_answer(tmp_path, change, field, shown):
    good = _rows(FIX / "tofu_tiny" / "forget10_perturbed.json")[:3]
    path = tmp_path / "forget10_perturbed.json"
    _write_rows(path, good[:1] + [_perturbed_row(**change)] + good[1:])
    with pytest.raises(DataError) as err:
        tofu.load_subset(tmp_path, "forget10_perturbed")
    assert str(err.value) == (f"{path}: row 1 (0-based), field '{field}': is empty or whitespace only: "
                              f"a scored field needs at least 1 non-space character (got {shown})")


def test_options_rows_and_an_empty_list(tmp_path):
    path = tmp_path / "world_facts_perturbed.json"
    _write_rows(path, [{"question": "q", "answer": "a", "perturbed_answer": ["b", "\t"]}])
    with pytest.raises(DataError, match=r"row 0 \(0-based\), field 'perturbed_answer\.1': is empty or whitespace only"):
        tofu.load_subset(tmp_path, "world_facts_perturbed")
    _write_rows(path, [{"question": "q", "answer": "a", "perturbed_answer": []}])
    with pytest.raises(DataError, match=r"row 0 \(0-based\), field 'perturbed_answer': List should have at least 1 item"):
        tofu.load_subset(tmp_path, "world_facts_perturbed")


@pytest.mark.parametrize("config, split, field", [
    ("verbmem", "forget", "prompt"), ("verbmem", "forget", "gt"),
    ("knowmem", "forget_qa", "question"), ("knowmem", "retain_qa_icl", "answer"),
    ("privleak", "holdout", "text"),
])
def test_muse_blank_scored_fields(tmp_path, config, split, field):
    shutil.copytree(FIX / "muse_tiny", tmp_path / "m")
    path = tmp_path / "m" / f"{config}_{split}.json"
    rows = _rows(path)
    rows[1][field] = " \n "
    _write_rows(path, rows)
    with pytest.raises(DataError, match=rf"{path.name}: row 1 \(0-based\), field '{field}': is empty or whitespace only"):
        muse.load_muse_split(tmp_path / "m", config, split)


# ------------------------------------------------------------------ item 12: retain logs


def _logs(tmp_path: Path, edit) -> Path:
    d = json.loads(LOGS.read_text())
    edit(d)
    path = tmp_path / "TOFU_EVAL.json"
    path.write_text(json.dumps(d))  # json writes NaN / Infinity literals, as open-unlearning does
    return path


def _set_score(d: dict, value) -> None:
    d["forget_truth_ratio"]["value_by_index"]["3"]["score"] = value


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["forget_truth_ratio"].update(value_by_index=list(d["forget_truth_ratio"]["value_by_index"].values())),
     "forget_truth_ratio.value_by_index is a list, expected an object of index -> {score}"),
    (lambda d: d["forget_truth_ratio"].update(value_by_index={}),
     "forget_truth_ratio.value_by_index is empty, expected an object of index -> {score} with at least one row"),
    (lambda d: d["forget_truth_ratio"]["value_by_index"].update({"3": 0.5}),
     "forget_truth_ratio.value_by_index['3'] is a float, expected {score}"),
    (lambda d: d["forget_truth_ratio"]["value_by_index"].update({"3": {"prob": 0.5}}),
     "forget_truth_ratio.value_by_index['3'] is an object without 'score' (keys ['prob']), expected {score}"),
    (lambda d: d["forget_truth_ratio"]["value_by_index"].update({"x": {"score": 0.5}}),
     "forget_truth_ratio.value_by_index key 'x' is not a row index (0, 1, ...)"),
    (lambda d: _set_score(d, math.inf), "forget_truth_ratio.value_by_index['3'].score is inf, expected a truth ratio"),
    (lambda d: _set_score(d, -0.5), "forget_truth_ratio.value_by_index['3'].score is -0.5, expected a truth ratio"),
    (lambda d: _set_score(d, "0.5"), "forget_truth_ratio.value_by_index['3'].score is '0.5', expected a truth ratio"),
    (lambda d: d.update(forget_truth_ratio=[1, 2]), "forget_truth_ratio is a list, expected an object with 'value_by_index'"),
    (lambda d: d["mia_min_k"].update(agg_value=math.inf), "mia_min_k.agg_value is inf, expected an AUC: a number in [0, 1]"),
    (lambda d: d["mia_min_k"].update(agg_value=7.5), "mia_min_k.agg_value is 7.5, expected an AUC: a number in [0, 1]"),
    (lambda d: d["mia_min_k"].update(agg_value=-0.01), "mia_min_k.agg_value is -0.01, expected an AUC: a number in [0, 1]"),
    (lambda d: d["mia_min_k"].update(agg_value=math.nan), "mia_min_k.agg_value is nan, expected an AUC: a number in [0, 1]"),
    (lambda d: d["mia_min_k"].update(agg_value=True), "mia_min_k.agg_value is True, expected an AUC: a number in [0, 1]"),
])
def test_bad_retain_logs_name_file_and_key(tmp_path, edit, message):
    path = _logs(tmp_path, edit)
    with pytest.raises(DataError) as err:
        eval_logs.load_eval_logs(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_nan_and_null_truth_ratios_stay_legal(tmp_path):
    """open-unlearning writes NaN for an item with no scored tokens; the KS test then gives NaN, as there."""
    path = _logs(tmp_path, lambda d: (_set_score(d, math.nan), d["forget_truth_ratio"]["value_by_index"]["4"].update(score=None),
                                      d["forget_truth_ratio"]["value_by_index"]["5"].update(score=0)))
    logs = eval_logs.load_eval_logs(path)
    assert math.isnan(logs.forget_truth_ratio["3"]) and logs.forget_truth_ratio["4"] is None and logs.forget_truth_ratio["5"] == 0.0
    assert logs.mia_min_k_auc == 0.42875  # read from the fixture by hand


def test_only_the_keys_the_asked_metrics_read_are_needed(tmp_path):
    path = _logs(tmp_path, lambda d: d.pop("forget_truth_ratio"))
    assert eval_logs.load_eval_logs(path, ["privleak", "forget_Q_A_Prob"]).mia_min_k_auc == 0.42875
    with pytest.raises(DataError, match=r"lack 'forget_truth_ratio.value_by_index' \(needed for forget_quality\)"):
        eval_logs.load_eval_logs(path, ["forget_quality"])
    path = _logs(tmp_path, lambda d: d["mia_min_k"].update(agg_value=7.5))
    assert eval_logs.load_eval_logs(path, ["forget_quality"]).mia_min_k_auc is None
    assert muse.load_eval_logs(path, ["forget_knowmem_ROUGE"]).mia_min_k_auc is None
    with pytest.raises(DataError, match="mia_min_k.agg_value is 7.5"):
        muse.load_eval_logs(path)


def test_privleak_says_why_it_is_not_a_number():
    out = privleak(0.4, math.inf)
    assert math.isnan(out["agg_value"])
    assert out["reason"] == "privleak is nan: an AUC is not a number in [0, 1] (model 0.4, retain inf)"
    assert privleak(0.4, 0.5) == {"agg_value": pytest.approx((0.6 - 0.5) / (0.5 + 1e-10) * 100)}


def test_forget_quality_names_a_retain_row_without_a_score():
    with pytest.raises(ValueError, match=r"retain truth ratios: value_by_index\['1'\] is a list, expected \{score\}"):
        forget_quality({"0": {"score": 1.0}}, {"0": {"score": 1.0}, "1": [1.0]})


# ------------------------------------------------------------------ through the CLI


@pytest.fixture
def no_model_loads(monkeypatch):
    from evaldag.engine.adapters import hf

    def refuse(self, *a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(hf.HFModel, "load", refuse)
    monkeypatch.setattr(hf.HFModel, "encoder", refuse)


def _run(tmp_path: Path, data: Path, *extra: str) -> list:
    out = tmp_path / "out"
    code = cli.main(["run", "tofu", "--model", str(TARGET), "--data", str(data), "--quiet",
                     "--metrics", "forget_truth_ratio,forget_quality,privleak",
                     "--out", str(out), "--cache-dir", str(tmp_path / "cache"), *extra])
    return [code, out.exists()]


def test_cli_refuses_each_case_in_one_line_before_any_model(tmp_path, capsys, no_model_loads):
    good = tmp_path / "good"
    shutil.copytree(FIX / "tofu_tiny", good)
    cases = {}
    d = tmp_path / "latin1"
    shutil.copytree(good, d)
    _, column = _latin1_line(d / "forget10_perturbed.json", 2, "Dara", "D\xe9ra")
    assert column == 33  # '{"question": "In what year was D' is 32 characters
    cases["latin1"] = (d, (), f"{d / 'forget10_perturbed.json'}: line 2 (row 1, 0-based), column 33: byte 0xe9 is not UTF-8")
    d = tmp_path / "blank"
    shutil.copytree(good, d)
    rows = _rows(d / "forget10_perturbed.json")
    rows[7]["paraphrased_answer"] = " "
    _write_rows(d / "forget10_perturbed.json", rows)
    cases["blank"] = (d, (), f"{d / 'forget10_perturbed.json'}: row 7 (0-based), field 'paraphrased_answer': is empty")
    logs = _logs(tmp_path, lambda x: x["forget_truth_ratio"].update(value_by_index=[]))
    cases["list"] = (good, ("--retain-logs", str(logs)), f"{logs}: forget_truth_ratio.value_by_index is a list")
    for name, (data, extra, message) in cases.items():
        got = _run(tmp_path, data, *extra)
        err = capsys.readouterr().err
        assert got == [2, False], name
        assert err.startswith(f"evaldag: error: {message}") and err.count("\n") == 1, (name, err)


def test_from_logs_names_an_entry_that_is_not_an_object():
    from evaldag.metrics.unlearning.retain_logs import LogKey, from_logs

    out = from_logs(key="mia_min_k").metric.fn({"mia_min_k": [0.5]}, LogKey(key="mia_min_k"))
    assert out.agg_value is None and out.reason == "the retain logs' 'mia_min_k' entry is a list, not an object"


def test_probe_jsonl_names_a_bad_line(tmp_path):
    path = tmp_path / "explicit.jsonl"
    path.write_text('{"a": 1}\n\n{"a": \n')
    with pytest.raises(ValueError, match=rf"^{path}:3: not JSON \(Expecting value: line 1 column 7"):
        probes.read_jsonl(path)


def test_cli_probe_data_not_utf8_is_refused_while_building(tmp_path, capsys, no_model_loads):
    data = tmp_path / "pd"
    shutil.copytree(FIX / "probe_data", data)
    _latin1(data / "isear" / "isear_samples.txt", "I was happy\nI was caf\xe9\n")
    out = tmp_path / "out"
    code = cli.main(["run", "probes", "--probes", "isear", "--probe-data", str(data), "--generator", f"hf:{TARGET}",
                     "--max-new-tokens", "2", "--sample-k", "2", "--no-cis", "--quiet",
                     "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert [code, out.exists()] == [2, False]
    assert err == (f"evaldag: error: {data / 'isear' / 'isear_samples.txt'}: line 2, column 10: byte 0xe9 is not UTF-8 "
                   "(byte offset 21: invalid continuation byte); save the file as UTF-8\n")
