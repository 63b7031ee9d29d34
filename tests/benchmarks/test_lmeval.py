"""``evaldag run lmeval`` against lm-evaluation-harness's own HFLM (fp32, batch size 1).

On local tasks of each output type (``lmeval_tasks.py``) and the tiny Llama fixture, the
per-sample ``resps`` and every aggregate must equal HFLM's through the same installed
lm-evaluation-harness: log-likelihoods within 1e-5, greedy flags, generated strings and
accuracies exactly. Then: a warm rerun loads no weights and imports no lm-evaluation-harness
work, and the identity settings are in run.json.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.benchmarks.lmeval_tasks import MODEL, REPO, ROWS, need_lm_eval, write_tasks

TASKS = "fx_mc,fx_gen,fx_roll,fx_group"


def _cli(args: list[str], capsys) -> tuple[int, str]:
    from evaldag.engine.cli import main

    capsys.readouterr()
    code = main(args)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    need_lm_eval()
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from evaldag.benchmarks.lmeval.nodes import plain
    from evaldag.engine.cli import main

    root = tmp_path_factory.mktemp("lmeval")
    tasks = write_tasks(root / "tasks")
    # logits_cache=False: with its default True, HFLM 0.4.13 groups requests by their input ids alone, so
    # fx_mcq's " Cusco." after "...city of" (2 tokens) got fx_mc0's whole-answer score (-29.06, greedy)
    # because both forward the same ids; alone, or without the cache, HFLM gives -0.0054, as evaldag does.
    ref_lm = HFLM(pretrained=str(MODEL), dtype="float32", batch_size=1, device="cpu", logits_cache=False)
    ref = lm_eval.simple_evaluate(model=ref_lm, tasks=TASKS.split(","), task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
                                  log_samples=True, bootstrap_iters=100, fewshot_as_multiturn=False)
    chat_ref = lm_eval.simple_evaluate(model=ref_lm, tasks=["fx_mc0", "fx_gen"], limit=2, apply_chat_template=True,
                                       system_instruction="Be brief.", fewshot_as_multiturn=True, log_samples=True,
                                       task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
                                       bootstrap_iters=0)
    out, cache = root / "out", root / "cache"
    argv = ["run", "lmeval", "--tasks", TASKS, "--include-path", str(tasks), "--model", str(MODEL), "--dtype", "fp32",
            "--device", "cpu", "--bootstrap-iters", "100", "--out", str(out), "--cache-dir", str(cache), "--quiet"]
    assert main(argv) == 0
    cold = json.loads((out / "run.json").read_text())
    cold_results = (out / "lm_eval_results.json").read_text()
    assert main(argv) == 0  # warm
    assert (out / "lm_eval_results.json").read_text() == cold_results  # written again from the store
    chat = root / "chat"
    assert main(["run", "lmeval", "--tasks", "fx_mc0,fx_gen", "--limit", "2", "--template", "chat", "--system-prompt",
                 "Be brief.", "--include-path", str(tasks), "--model", str(MODEL), "--dtype", "fp32", "--device", "cpu",
                 "--bootstrap-iters", "0", "--out", str(chat), "--cache-dir", str(cache), "--quiet"]) == 0
    return {"ref": plain(ref), "chat_ref": plain(chat_ref), "chat": chat, "out": out, "cold": cold, "warm": json.loads((out / "run.json").read_text()), "tasks": tasks}


def _samples(out: Path, task: str) -> list[dict]:
    lines = (out / f"lm_eval_samples_{task}.jsonl").read_text().splitlines()
    return sorted((json.loads(x) for x in lines), key=lambda s: (s["doc_id"], s.get("filter", "")))


def _close(a, b, tol=1e-5) -> bool:
    """Equal structure; floats within tol, everything else exactly."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and math.isclose(a, b, rel_tol=tol, abs_tol=tol)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("task", ["fx_mc", "fx_mcq", "fx_gen", "fx_roll"])
def test_samples_equal_hflm(runs, task):
    ours = _samples(runs["out"], task)
    ref = sorted(runs["ref"]["samples"][task], key=lambda s: (s["doc_id"], s.get("filter", "")))
    assert len(ours) == len(ref) == ROWS
    for a, b in zip(ours, ref):
        assert a["doc_id"] == b["doc_id"] and a["arguments"] == b["arguments"]
        assert _close(a["resps"], b["resps"]), (task, a["doc_id"], a["resps"], b["resps"])
        assert _close(a["filtered_resps"], b["filtered_resps"])
        for m in ("acc", "acc_norm", "exact_match"):
            if m in b:
                assert a[m] == b[m], (task, a["doc_id"], m)
    if task == "fx_gen":  # strings exactly, and not all empty (the check would be vacuous)
        assert [a["resps"] for a in ours] == [b["resps"] for b in ref]
        assert any(a["resps"][0][0].strip() for a in ours)
    if task == "fx_mcq":  # the greedy flags, compared exactly above, are not all alike
        assert len({x[0][1] for a in ours for x in a["resps"]}) == 2


@pytest.mark.parametrize("task", ["fx_mc0", "fx_gen"])
def test_chat_template_and_system_prompt_equal_hflm(runs, task):
    """--template chat / --system-prompt: its apply_chat_template / system_instruction, prompt and answers alike."""
    ours = _samples(runs["chat"], task)
    ref = sorted(runs["chat_ref"]["samples"][task], key=lambda s: s["doc_id"])
    assert len(ours) == len(ref) == 2
    for a, b in zip(ours, ref):
        assert a["arguments"] == b["arguments"] and "Be brief." in json.dumps(a["arguments"])
        assert _close(a["resps"], b["resps"])


def test_aggregates_equal_hflm(runs):
    ours = json.loads((runs["out"] / "lm_eval_results.json").read_text())
    for task in ("fx_mc", "fx_gen", "fx_roll", "fx_group"):
        ref = runs["ref"]["results"][task]
        for key, value in ref.items():
            if key == "alias" or "_stderr" in key:
                continue
            exact = key.split(",")[0] in ("acc", "acc_norm", "exact_match")
            assert _close(ours["results"][task][key], value, 0 if exact else 1e-5), (task, key)
    for k in ("configs", "versions", "n-shot", "higher_is_better"):
        assert set(ours[k]) == set(runs["ref"][k])
    assert ours["n-shot"]["fx_mc"] == 1


def test_eval_and_summary(runs):
    ev = json.loads((runs["out"] / "LMEVAL_EVAL.json").read_text())
    summary = json.loads((runs["out"] / "LMEVAL_SUMMARY.json").read_text())
    ref = runs["ref"]["results"]
    assert summary["fx_mc.acc"] == ref["fx_mc"]["acc,none"]
    assert summary["fx_group.acc"] == ref["fx_group"]["acc,none"]
    assert math.isclose(summary["fx_roll.word_perplexity"], ref["fx_roll"]["word_perplexity,none"], rel_tol=1e-5)
    assert not {"fx_mc0.acc", "fx_mcq.acc"} & set(summary)  # a group's members are in lm_eval_results.json, not entries
    mc = ev["fx_mc.acc"]
    assert mc["stderr"] == pytest.approx(ref["fx_mc"]["acc_stderr,none"])
    per_doc = [s["acc"] for s in sorted(runs["ref"]["samples"]["fx_mc"], key=lambda s: s["doc_id"])]
    assert [mc["value_by_index"][str(i)]["score"] for i in range(ROWS)] == per_doc


def test_warm_rerun_loads_nothing_and_identity_recorded(runs):
    assert runs["cold"]["executor"]["model_loaded"] is True
    assert runs["warm"]["executor"]["model_loaded"] is False
    scorer = next(k for k in runs["cold"]["nodes"] if k.startswith("lm_eval"))
    assert runs["warm"]["nodes"][scorer]["status"] == "cached"
    params = runs["cold"]["nodes"][scorer]["params"]
    import lm_eval  # noqa: F401
    from importlib.metadata import version

    assert params["lm_eval_version"] == version("lm_eval")
    assert params["add_bos_token"] is None and params["prefix_token_id"] is None
    ours = json.loads((runs["out"] / "lm_eval_results.json").read_text())
    assert ours["config"]["adds_bos"] is True and ours["config"]["prefix_token_id"] == 0  # 0.4.13 + this tokenizer


def test_report_section(runs):
    html = (runs["out"] / "report.html").read_text()
    assert 'data-task="fx_mc" data-metric="acc" data-filter="none"' in html
    assert "lm-evaluation-harness" in html


def test_evaldag_lm_inside_simple_evaluate(runs):
    """The other direction: lm-evaluation-harness's simple_evaluate on EvaldagLM gives HFLM's numbers."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from evaldag.benchmarks.lmeval.lm import EvaldagLM
    from evaldag.benchmarks.lmeval.nodes import plain

    lm = EvaldagLM(str(MODEL), dtype="fp32", device="cpu")
    res = plain(lm_eval.simple_evaluate(model=lm, tasks=["fx_roll"], bootstrap_iters=100, fewshot_as_multiturn=False,
                                        task_manager=TaskManager(include_path=str(runs["tasks"]), include_defaults=False)))
    ref = sorted(runs["ref"]["samples"]["fx_roll"], key=lambda s: s["doc_id"])
    ours = sorted(res["samples"]["fx_roll"], key=lambda s: s["doc_id"])
    assert _close([s["resps"] for s in ours], [s["resps"] for s in ref])
    assert _close(res["results"]["fx_roll"]["word_perplexity,none"], runs["ref"]["results"]["fx_roll"]["word_perplexity,none"])


def test_docs_example_runs_and_caches(capsys, monkeypatch):
    """docs/lmeval.md's example, run as written: the second evaluation comes from the cache, no weights."""
    need_lm_eval()
    text = (REPO / "docs" / "lmeval.md").read_text()
    block = text.split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    exec(compile(block, "docs/lmeval.md", "exec"), {"__name__": "__docs__"})
    cold, warm = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(("cold", "warm"))]
    assert cold[1] == warm[1] and float(cold[1]) > 1
    assert cold[2] == "0" and cold[-1] == "True"  # nothing cached yet; the weights loaded
    assert warm[2] == warm[4] != "0" and warm[-1] == "False"  # every request from the cache, no weights


def test_composed_with_tofu_one_graph_one_model(runs, tmp_path):
    """``evaldag run tofu lmeval``: both benchmarks' files and report sections, the model loaded once,
    and lmeval's numbers those of the run alone."""
    from evaldag.engine.cli import main

    out = tmp_path / "out"
    tofu = Path(__file__).resolve().parents[1] / "fixtures" / "tofu_tiny"
    assert main(["run", "tofu", "lmeval", "--metrics", "forget_Q_A_Prob", "--tofu-data", str(tofu), "--tasks", "fx_roll",
                 "--include-path", str(runs["tasks"]), "--model", str(MODEL), "--dtype", "fp32", "--device", "cpu",
                 "--bootstrap-iters", "100", "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert len(run["executor"]["models_loaded"]) == 1
    assert {"TOFU/forget_Q_A_Prob", "LMEVAL/fx_roll.word_perplexity"} <= set(run["nodes"])
    alone = json.loads((runs["out"] / "LMEVAL_SUMMARY.json").read_text())
    both = json.loads((out / "LMEVAL_SUMMARY.json").read_text())
    assert both["fx_roll.word_perplexity"] == pytest.approx(alone["fx_roll.word_perplexity"], rel=1e-6)
    assert json.loads((out / "TOFU_SUMMARY.json").read_text())["forget_Q_A_Prob"] > 0
    html = (out / "report.html").read_text()
    assert 'data-task="fx_roll"' in html and "forget_Q_A_Prob" in html


def test_two_torchrun_ranks_shard_the_requests_and_give_the_same_files(runs, tmp_path):
    """Under torchrun, lm-evaluation-harness builds every request on every rank (it must not
    split the documents itself: evaldag's executor shards the forward passes) and rank 0
    writes files equal to the one-process run's, samples included."""
    import os
    import subprocess
    import sys

    out = tmp_path / "ranks"
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(torchrun), "--nproc-per-node", "2", "-m", "evaldag.engine.cli", "run", "lmeval", "--tasks",
                           TASKS, "--include-path", str(runs["tasks"]), "--model", str(MODEL), "--dtype", "fp32",
                           "--device", "cpu", "--bootstrap-iters", "100", "--out", str(out),
                           "--cache-dir", str(tmp_path / "cache"), "--quiet"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    one = runs["out"]
    assert json.loads((out / "lm_eval_results.json").read_text())["results"] == \
        json.loads((one / "lm_eval_results.json").read_text())["results"]
    for task in ("fx_mc", "fx_gen", "fx_roll"):
        assert (out / f"lm_eval_samples_{task}.jsonl").read_text() == (one / f"lm_eval_samples_{task}.jsonl").read_text()
    by_rank = json.loads((out / "run.json").read_text())["executor"]["by_rank"]
    assert set(by_rank) == {"0", "1"} and all(r["sequences_forwarded"] > 0 for r in by_rank.values())


def test_lm_evals_and_datasets_bars_stay_out_of_evaldags_progress(tmp_path, capsys):
    """With --progress on a pipe, stderr holds evaldag's lines only: lm-evaluation-harness's request
    bars ("Tokenizing inputs", one per task while it builds requests) and datasets' "Generating test
    split" would interleave with them (evaldag's own bars count the same requests, served)."""
    need_lm_eval()
    tasks = write_tasks(tmp_path / "tasks")
    code, err = _cli(["run", "lmeval", "--tasks", "fx_mc0,fx_gen", "--limit", "2", "--include-path", str(tasks),
                      "--model", str(MODEL), "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
                      "--progress"], capsys)
    assert code == 0
    lines = [x for x in err.replace("\r", "\n").splitlines() if x.strip()]
    assert any(x.startswith("evaldag token_stats: ") for x in lines)
    assert lines and all(x.startswith("evaldag") for x in lines), lines
