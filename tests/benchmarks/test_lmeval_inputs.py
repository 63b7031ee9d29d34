"""What an lm-evaluation-harness task reads is what its cached value depends on.

Each test runs ``evaldag run lmeval`` as a user does (the CLI's entry point in the test's process, one cache),
edits one input lm-evaluation-harness reads -- a data file a ``data_files`` glob resolves
to, a file in a local ``dataset_path`` folder, the ``!function`` module of a YAML pulled in
by ``include:`` from another folder -- and reruns: the value must be the one a fresh cache
computes from the edited inputs, never the stored one. A YAML syntax error in a task file
is named with its file and line, not reported as an unknown task.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from tests.benchmarks.lmeval_tasks import MODEL, _rows, need_lm_eval
from tests.inprocess import run_cli

MC = ("output_type: multiple_choice\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
      "doc_to_choice: \"{{choices}}\"\ndoc_to_target: gold\nmetric_list:\n  - metric: acc\n")


def lmeval(task: str, include: Path, out: Path, cache: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    proc = run_cli(["run", "lmeval", "--tasks", task, "--include-path", include, "--model", MODEL, "--dtype", "fp32",
                    "--device", "cpu", "--bootstrap-iters", "0", "--out", out, "--cache-dir", cache, "--quiet"])
    summary = out / "LMEVAL_SUMMARY.json"
    return proc, json.loads(summary.read_text()) if proc.returncode == 0 and summary.is_file() else None


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _wrong_gold(rows: list[dict]) -> list[dict]:
    return [{**r, "gold": (r["gold"] + 1) % 3} for r in rows]


def edited_run(tmp: Path, task: str, include: Path, edit: Callable[[], object]) -> tuple[list, list]:
    """Run, edit, rerun on the same cache, and run the edited task on a fresh cache -> (procs, summaries)."""
    first, before = lmeval(task, include, tmp / "before", tmp / "cache")
    edit()
    again, got = lmeval(task, include, tmp / "after", tmp / "cache")
    fresh, want = lmeval(task, include, tmp / "fresh", tmp / "cache-fresh")
    return [first, again, fresh], [before, got, want]


def _edited_is_recomputed(tmp_path: Path, task: str, include: Path, edit: Callable[[], object]) -> None:
    """The rerun after the edit equals a fresh cache's run of the edited task."""
    procs, (got0, got, want) = edited_run(tmp_path, task, include, edit)
    assert all(p.returncode == 0 for p in procs), "".join(p.stderr for p in procs)
    assert want != got0, "the edit must change the value, else this test proves nothing"
    assert got == want, f"served {got} after the edit; a fresh cache computes {want} (before the edit: {got0})"
    nodes = json.loads((tmp_path / "after" / "run.json").read_text())["nodes"]
    assert [n["status"] for k, n in nodes.items() if n["metric"] == "lm_eval"] == ["computed"]


def glob_case(tmp: Path) -> tuple[str, Path, Callable[[], object]]:
    """A task whose data_files is a glob over two files; the edit moves the gold answers of one."""
    rows, tasks, data = _rows(), tmp / "tasks", tmp / "data"
    tasks.mkdir()
    data.mkdir()
    (data / "a.jsonl").write_text(_jsonl(rows[:3]))
    (data / "b.jsonl").write_text(_jsonl(rows[3:]))
    (tasks / "fx_glob.yaml").write_text(f"task: fx_glob\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                        f"    test: {data}/*.jsonl\ntest_split: test\n" + MC)
    return "fx_glob", tasks, lambda: (data / "b.jsonl").write_text(_jsonl(_wrong_gold(rows[3:])))


def folder_case(tmp: Path) -> tuple[str, Path, Callable[[], object]]:
    """A task whose dataset_path is a local folder; the edit moves the gold answers of its file."""
    rows, tasks, folder = _rows(), tmp / "tasks", tmp / "dataset"
    tasks.mkdir()
    folder.mkdir()
    (folder / "rows.jsonl").write_text(_jsonl(rows))
    (tasks / "fx_folder.yaml").write_text(f"task: fx_folder\ndataset_path: {folder}\ntest_split: train\n" + MC)
    return "fx_folder", tasks, lambda: (folder / "rows.jsonl").write_text(_jsonl(_wrong_gold(rows)))


UTILS = "def process_docs(dataset):\n    return dataset\n"
ROTATE = "def process_docs(dataset):\n    return dataset.map(lambda d: {'gold': (d['gold'] + 1) % 3})\n"


def _shared_base(tmp: Path, extra: str = "") -> tuple[Path, Path, str]:
    tasks, shared = tmp / "tasks", tmp / "shared"
    tasks.mkdir()
    shared.mkdir()
    (shared / "rows.jsonl").write_text(_jsonl(_rows()))
    base = (f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {shared / 'rows.jsonl'}\n"
            "test_split: test\n" + extra + MC)
    (shared / "base.yaml").write_text(base)
    return tasks, shared, base


def function_case(tmp: Path) -> tuple[str, Path, Callable[[], object]]:
    """A task that includes a YAML of another folder whose !function module is beside it; the edit
    makes that module move the gold answers."""
    tasks, shared, _ = _shared_base(tmp, "process_docs: !function utils.process_docs\n")
    (shared / "utils.py").write_text(UTILS)
    (tasks / "fx_fn.yaml").write_text("include: ../shared/base.yaml\ntask: fx_fn\n")
    return "fx_fn", tasks, lambda: (shared / "utils.py").write_text(ROTATE)


def include_case(tmp: Path) -> tuple[str, Path, Callable[[], object]]:
    """A task that includes a YAML of another folder; the edit changes its doc_to_target."""
    tasks, shared, base = _shared_base(tmp)
    (tasks / "fx_inc.yaml").write_text("include: ../shared/base.yaml\ntask: fx_inc\n")
    edited = base.replace("doc_to_target: gold", "doc_to_target: \"{{(gold + 1) % 3}}\"")
    return "fx_inc", tasks, lambda: (shared / "base.yaml").write_text(edited)


@pytest.mark.parametrize("case", [glob_case, folder_case, function_case, include_case], ids=lambda c: c.__name__)
def test_an_edited_input_of_a_task_is_recomputed(tmp_path, case):
    need_lm_eval()
    _edited_is_recomputed(tmp_path, *case(tmp_path))


BROKEN = {"flow": ("task: fx_bad\ndataset_path: json\noutput_type: [multiple_choice\n", 4),
          "quote": ("task: fx_bad\ndoc_to_text: \"Question: {{question}}\n  bad: 'x'\ndoc_to_target: \"{{gold\"\"\n", 4)}


def broken_case(tmp: Path, text: str) -> Path:
    """A task folder with a good task and ``fx_bad.yaml`` holding ``text``."""
    tasks = tmp / "tasks"
    tasks.mkdir()
    (tasks / "fx_ok.yaml").write_text(f"task: fx_ok\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp}/x.jsonl\n"
                                      "test_split: test\n" + MC)
    (tasks / "fx_bad.yaml").write_text(text)
    return tasks


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, broken):
    need_lm_eval()
    text, line = BROKEN[broken]
    tasks = broken_case(tmp_path, text)
    proc, _ = lmeval("fx_bad", tasks, tmp_path / "out", tmp_path / "cache")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"evaldag: error: --include-path: {tasks / 'fx_bad.yaml'}, line {line}: "), lines[0]
    assert "unknown" not in lines[0]
    assert not (tmp_path / "out").exists()
