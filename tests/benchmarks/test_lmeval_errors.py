"""Bad input to ``evaldag run lmeval``: one ``evaldag: error:`` line, exit 2, nothing written, no model loaded."""

from __future__ import annotations

import sys

import pytest

from tests.benchmarks.lmeval_tasks import MODEL, need_lm_eval, write_tasks


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = write_tasks(tmp_path_factory.mktemp("lmeval_bad") / "tasks")
    (root / "fx_hub.yaml").write_text("task: fx_hub\ndataset_path: cais/wmdp\ndataset_name: wmdp-bio\ntest_split: test\n"
                                      "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_choice: c\ndoc_to_target: 0\n")
    (root / "fx_image.yaml").write_text((root / "fx_gen.yaml").read_text().replace("task: fx_gen", "task: fx_image")
                                        + "doc_to_image: [image]\n")
    (root / "fx_missing.yaml").write_text((root / "fx_mc.yaml").read_text().replace("task: fx_mc", "task: fx_missing")
                                          .replace("rows.jsonl", "nowhere.jsonl"))
    return root


def _run(tasks_arg: str, include: str, tmp_path, capsys, model: str = str(MODEL)) -> str:
    from evaldag.engine.cli import main

    out = tmp_path / "out"
    capsys.readouterr()
    code = main(["run", "lmeval", "--tasks", tasks_arg, "--include-path", include, "--model", model,
                 "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("evaldag: error: "), err
    assert not out.exists() or not any(out.iterdir())
    assert "Traceback" not in err
    return lines[0]


def test_unknown_task_names_close_matches(tasks, tmp_path, capsys):
    need_lm_eval()
    line = _run("fx_mcc", str(tasks), tmp_path, capsys)
    assert "unknown lm-evaluation-harness task 'fx_mcc'" in line and "close matches: fx_mc" in line


def test_hub_dataset_offline_names_dataset_and_include_path(tasks, tmp_path, capsys, monkeypatch):
    need_lm_eval()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no cached copy
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    line = _run("fx_hub", str(tasks), tmp_path, capsys)
    assert "'fx_hub' needs dataset 'cais/wmdp'" in line and "HF_HUB_OFFLINE" in line
    assert f"--include-path {tasks}" in line


def test_unservable_task_named_before_model(tasks, tmp_path, capsys):
    need_lm_eval()
    line = _run("fx_image", str(tasks), tmp_path, capsys)
    assert "task 'fx_image' is multimodal (doc_to_image)" in line


def test_task_in_two_top_level_names(tasks, tmp_path, capsys):
    need_lm_eval()
    line = _run("fx_mc0,fx_group", str(tasks), tmp_path, capsys)
    assert "task 'fx_mc0' is named twice ('fx_mc0' and 'fx_group')" in line


def test_model_without_a_checkpoint_folder(tasks, tmp_path, capsys):
    need_lm_eval()
    line = _run("fx_mc", str(tasks), tmp_path, capsys, model="toy:0")
    assert "--model toy:0: lmeval serves a local checkpoint" in line


def test_missing_data_file(tasks, tmp_path, capsys):
    need_lm_eval()
    line = _run("fx_missing", str(tasks), tmp_path, capsys)
    assert "'fx_missing' reads data file" in line and "nowhere.jsonl" in line


def test_not_installed(tasks, tmp_path, capsys, monkeypatch):
    for mod in [m for m in sys.modules if m == "lm_eval" or m.startswith("lm_eval.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # import lm_eval -> ImportError
    from evaldag.benchmarks.lmeval import tasks as tasks_mod

    def missing(_name):
        from importlib.metadata import PackageNotFoundError

        raise PackageNotFoundError("lm_eval")

    monkeypatch.setattr("importlib.metadata.version", missing)
    assert tasks_mod.INSTALL in _run("fx_mc", str(tasks), tmp_path, capsys)
