"""What an lm-evaluation-harness task reads is what its cached value depends on.

Each test runs ``evaldag run lmeval`` as a user does (the CLI, in a subprocess, one cache),
edits one input lm-evaluation-harness reads -- a data file a ``data_files`` glob resolves
to, a file in a local ``dataset_path`` folder, the ``!function`` module of a YAML pulled in
by ``include:`` from another folder -- and reruns: the value must be the one a fresh cache
computes from the edited inputs, never the stored one. A YAML syntax error in a task file
is named with its file and line, not reported as an unknown task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.lmeval_tasks import MODEL, _rows, need_lm_eval

EVALDAG = str(Path(sys.executable).with_name("evaldag"))

MC = ("output_type: multiple_choice\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
      "doc_to_choice: \"{{choices}}\"\ndoc_to_target: gold\nmetric_list:\n  - metric: acc\n")


def _lmeval(task: str, include: Path, out: Path, cache: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([EVALDAG, "run", "lmeval", "--tasks", task, "--include-path", str(include), "--model", str(MODEL),
                           "--dtype", "fp32", "--device", "cpu", "--bootstrap-iters", "0", "--out", str(out),
                           "--cache-dir", str(cache), "--quiet"], capture_output=True, text=True, env=env, timeout=600)
    summary = out / "LMEVAL_SUMMARY.json"
    return proc, json.loads(summary.read_text()) if proc.returncode == 0 and summary.is_file() else None


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _wrong_gold(rows: list[dict]) -> list[dict]:
    return [{**r, "gold": (r["gold"] + 1) % 3} for r in rows]


def _edited_is_recomputed(tmp_path: Path, task: str, include: Path, edit) -> None:
    """Run, edit, rerun on the same cache: the rerun equals a fresh cache's run of the edited task."""
    first, got0 = _lmeval(task, include, tmp_path / "before", tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    edit()
    again, got = _lmeval(task, include, tmp_path / "after", tmp_path / "cache")
    fresh, want = _lmeval(task, include, tmp_path / "fresh", tmp_path / "cache-fresh")
    assert again.returncode == 0 and fresh.returncode == 0, again.stderr + fresh.stderr
    assert want != got0, "the edit must change the value, else this test proves nothing"
    assert got == want, f"served {got} after the edit; a fresh cache computes {want} (before the edit: {got0})"
    nodes = json.loads((tmp_path / "after" / "run.json").read_text())["nodes"]
    assert [n["status"] for k, n in nodes.items() if n["metric"] == "lm_eval"] == ["computed"]


def test_a_data_file_a_glob_resolves_to_is_part_of_the_digest(tmp_path):
    need_lm_eval()
    rows, tasks, data = _rows(), tmp_path / "tasks", tmp_path / "data"
    tasks.mkdir()
    data.mkdir()
    (data / "a.jsonl").write_text(_jsonl(rows[:3]))
    (data / "b.jsonl").write_text(_jsonl(rows[3:]))
    (tasks / "fx_glob.yaml").write_text(f"task: fx_glob\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                        f"    test: {data}/*.jsonl\ntest_split: test\n" + MC)
    _edited_is_recomputed(tmp_path, "fx_glob", tasks,
                          lambda: (data / "b.jsonl").write_text(_jsonl(_wrong_gold(rows[3:]))))


def test_a_file_in_a_local_dataset_folder_is_part_of_the_digest(tmp_path):
    need_lm_eval()
    rows, tasks, folder = _rows(), tmp_path / "tasks", tmp_path / "dataset"
    tasks.mkdir()
    folder.mkdir()
    (folder / "rows.jsonl").write_text(_jsonl(rows))
    (tasks / "fx_folder.yaml").write_text(f"task: fx_folder\ndataset_path: {folder}\ntest_split: train\n" + MC)
    _edited_is_recomputed(tmp_path, "fx_folder", tasks,
                          lambda: (folder / "rows.jsonl").write_text(_jsonl(_wrong_gold(rows))))


UTILS = "def process_docs(dataset):\n    return dataset\n"
ROTATE = "def process_docs(dataset):\n    return dataset.map(lambda d: {'gold': (d['gold'] + 1) % 3})\n"


def test_the_function_module_of_an_included_yaml_in_another_folder_is_part_of_the_digest(tmp_path):
    need_lm_eval()
    tasks, shared = tmp_path / "tasks", tmp_path / "shared"
    tasks.mkdir()
    shared.mkdir()
    (shared / "rows.jsonl").write_text(_jsonl(_rows()))
    (shared / "utils.py").write_text(UTILS)
    (shared / "base.yaml").write_text(f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {shared / 'rows.jsonl'}\n"
                                      "test_split: test\nprocess_docs: !function utils.process_docs\n" + MC)
    (tasks / "fx_fn.yaml").write_text("include: ../shared/base.yaml\ntask: fx_fn\n")
    _edited_is_recomputed(tmp_path, "fx_fn", tasks, lambda: (shared / "utils.py").write_text(ROTATE))


def test_an_included_yaml_in_another_folder_is_part_of_the_digest(tmp_path):
    need_lm_eval()
    tasks, shared = tmp_path / "tasks", tmp_path / "shared"
    tasks.mkdir()
    shared.mkdir()
    (shared / "rows.jsonl").write_text(_jsonl(_rows()))
    base = (f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {shared / 'rows.jsonl'}\n"
            "test_split: test\n" + MC)
    (shared / "base.yaml").write_text(base)
    (tasks / "fx_inc.yaml").write_text("include: ../shared/base.yaml\ntask: fx_inc\n")
    _edited_is_recomputed(tmp_path, "fx_inc", tasks,
                          lambda: (shared / "base.yaml").write_text(base.replace("doc_to_target: gold",
                                                                                 "doc_to_target: \"{{(gold + 1) % 3}}\"")))


@pytest.mark.parametrize("text,line", [
    ("task: fx_bad\ndataset_path: json\noutput_type: [multiple_choice\n", 4),
    ("task: fx_bad\ndoc_to_text: \"Question: {{question}}\n  bad: 'x'\ndoc_to_target: \"{{gold\"\"\n", 4),
])
def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, text, line):
    need_lm_eval()
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "fx_ok.yaml").write_text(f"task: fx_ok\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path}/x.jsonl\n"
                                      "test_split: test\n" + MC)
    (tasks / "fx_bad.yaml").write_text(text)
    proc, _ = _lmeval("fx_bad", tasks, tmp_path / "out", tmp_path / "cache")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"evaldag: error: --include-path: {tasks / 'fx_bad.yaml'}, line {line}: "), lines[0]
    assert "unknown" not in lines[0]
    assert not (tmp_path / "out").exists()
