"""The examples in the docs run, as written."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine import TokenStats

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "writing-a-metric.md"


def _section_blocks(text: str, heading: str) -> list[str]:
    """The ```python blocks of one ``## heading`` section, in order."""
    section = re.search(rf"## {re.escape(heading)}\n(.*?)(?=\n## |\Z)", text, re.S).group(1)
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize("which", ["hf", "toy"])
def test_worked_example_runs(tmp_path, capsys, monkeypatch, which):
    """The page's worked example and its second-model example, on the tiny HF checkpoint and on the toy model."""
    monkeypatch.chdir(ROOT)  # the page names the checkpoint relative to the repository
    text = DOC.read_text()
    hf_model, toy_model, example = _section_blocks(text, "A worked example")
    (second,) = _section_blocks(text, "Asking a second model")
    ns = {"CACHE": str(tmp_path), "__name__": "doc_example"}
    for block in ({"hf": hf_model, "toy": toy_model}[which], example, second):
        exec(compile(block, str(DOC), "exec"), ns)
    model = ns["model"]
    assert type(model).__name__ == {"hf": "HFModel", "toy": "ToyModel"}[which]
    nll, min_k, nll_other = (float(x) for x in capsys.readouterr().out.split())
    assert ns["again"].count("cached") == 5
    # the printed numbers are the token log-probs of the encoded answers, recomputed here
    enc = model.encoder()
    adapter = model.load()
    rows = ns["rows"]

    def logprobs(field):
        reqs = [TokenStats(tuple(enc.encode(r["question"])), tuple(enc.encode(r[field], add_special_tokens=False))) for r in rows]
        return [np.asarray(s.logprob, dtype=np.float64) for s in adapter.run_batch(reqs)]

    answer, other = logprobs("answer"), logprobs("other")
    assert nll == pytest.approx(np.mean([-lp.mean() for lp in answer]), rel=1e-5)
    assert nll_other == pytest.approx(np.mean([-lp.mean() for lp in other]), rel=1e-5)
    assert min_k == pytest.approx(np.mean([-np.sort(lp)[: max(1, int(len(lp) * 0.5))].mean() for lp in answer]), rel=1e-5)
    assert nll != nll_other
    # the retain model scored what the model generated: a different model, a finite number
    assert ns["pair"].ok and np.isfinite(ns["pair"]["answer_under_retain"].agg_value)


def test_encoders_agree_on_encode_decode():
    """encode/decode, the Encoder protocol's plain text <-> ids pair, on both encoders."""
    from evaldag.engine import HFModel
    from evaldag.engine.adapters.base import Encoder
    from evaldag.engine.adapters.toy import BOS, ToyEncoder

    toy = ToyEncoder()
    hf = HFModel(str(ROOT / "tests" / "fixtures" / "tiny-llama" / "target")).encoder()
    for enc in (toy, hf):
        assert isinstance(enc, Encoder)
        bare = enc.encode("the sky is blue", add_special_tokens=False)
        assert enc.decode(bare) == "the sky is blue"
        assert enc.encode("the sky is blue") == [enc.tokenizer.bos_token_id if enc is hf else BOS] + bare
    assert hf.encode("blue", add_special_tokens=False) == hf.tokenizer("blue", add_special_tokens=False)["input_ids"]


def test_quick_start_python_example_runs(tmp_path, monkeypatch):
    """docs/quick-start.md's Python block, on the fixture checkpoints and data."""
    fix = Path(__file__).parents[1] / "fixtures"
    for name, target in (("TOFU", fix / "tofu_tiny"), ("ckpt", fix / "tiny-llama" / "target"), ("retain", fix / "tiny-llama" / "retain")):
        (tmp_path / name).symlink_to(target)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVALDAG_CACHE_DIR", str(tmp_path / "cache"))
    text = (DOC.parent / "quick-start.md").read_text()
    block = re.search(r"## 4. In Python\n\n```python\n(.*?)```", text, re.S).group(1)
    ns: dict = {"__name__": "quick_start"}
    exec(compile(block, "quick-start.md", "exec"), ns)
    # the fixture target against the fixture retain model: open-unlearning's own forget quality
    assert ns["result"]["TOFU/forget_quality"].agg_value == pytest.approx(1.8880552265017844e-06, rel=1e-2)
    assert (tmp_path / "results" / "TOFU_SUMMARY.json").exists()


def test_writing_a_benchmark_retain_recipe_runs(tmp_path, monkeypatch):
    """docs/writing-a-benchmark.md §1-§3 on the fixture data and checkpoints: both sides land in the EVAL file."""
    from evaldag.engine import write_report

    fix = ROOT / "tests" / "fixtures"
    text = (DOC.parent / "writing-a-benchmark.md").read_text()
    blocks = [b for h in ("1. Name the nodes", "2. Bind the resources", "3. Reuse the retain side") for b in _section_blocks(text, h)]
    code = "\n".join(blocks)
    for placeholder, real in (("path/to/checkpoint", fix / "tiny-llama" / "target"), ("path/to/retain", fix / "tiny-llama" / "retain"),
                              ("path/to/tofu", fix / "tofu_tiny")):
        assert placeholder in code
        code = code.replace(placeholder, str(real))
    monkeypatch.setenv("EVALDAG_CACHE_DIR", str(tmp_path / "cache"))
    ns: dict = {"__name__": "benchmark_doc"}
    exec(compile(code, "writing-a-benchmark.md", "exec"), ns)
    result = ns["result"]
    assert result.ok
    ours, retain = result["forget_TR"].agg_value, result["forget_TR@retain_model"].agg_value
    assert np.isfinite(ours) and np.isfinite(retain) and ours != retain
    write_report(result, tmp_path / "out")
    evals = json.loads((tmp_path / "out" / "MYBENCH_EVAL.json").read_text())
    assert {"forget_TR", "forget_TR@retain_model", "forget_PARA@retain_model", "forget_PERT@retain_model"} <= set(evals)
    assert evals["forget_TR@retain_model"]["agg_value"] == retain


def test_adding_a_metric_to_a_benchmark_runs(tmp_path, monkeypatch):
    """The page's "Adding your metric to a benchmark" block, after the worked example, on the fixture TOFU data."""
    from evaldag.benchmarks.tofu.data import load_subset

    fix = ROOT / "tests" / "fixtures"
    monkeypatch.chdir(ROOT)
    text = DOC.read_text()
    hf_model, _, example = _section_blocks(text, "A worked example")
    (block,) = _section_blocks(text, "Adding your metric to a benchmark")
    ns = {"CACHE": str(tmp_path / "example-cache"), "__name__": "doc_example"}
    for b in (hf_model, example):
        exec(compile(b, str(DOC), "exec"), ns)
    for name, target in (("TOFU", fix / "tofu_tiny"), ("ckpt", fix / "tiny-llama" / "target")):
        (tmp_path / name).symlink_to(target)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVALDAG_CACHE_DIR", str(tmp_path / "cache"))
    exec(compile(block, str(DOC), "exec"), ns)
    tofu = ns["tofu"]
    assert tofu.ok
    assert sorted(ns["resources"]) == ["model", "template", "tofu_forget", "tofu_holdout", "tofu_ra", "tofu_retain", "tofu_wf"]  # as the page prints
    out = tmp_path / "results"
    assert set(json.loads((out / "TOFU_EVAL.json").read_text())) == {"forget_Q_A_Prob"}
    mine = json.loads((out / "RUN_EVAL.json").read_text())["forget_nll"]
    # the user's metric on the forget split: the mean NLL of each answer given its question
    enc, adapter = ns["model"].encoder(), ns["model"].load()
    rows = load_subset(str(fix / "tofu_tiny"), "forget10")
    reqs = [TokenStats(tuple(enc.encode(r["question"])), tuple(enc.encode(r["answer"], add_special_tokens=False))) for r in rows]
    nll = [-float(np.asarray(s.logprob, dtype=np.float64).mean()) for s in adapter.run_batch(reqs)]
    assert len(mine["value_by_index"]) == len(rows)
    assert mine["agg_value"] == pytest.approx(np.mean(nll), rel=1e-5)
    assert json.loads((out / "RUN_SUMMARY.json").read_text()) == {"forget_nll": mine["agg_value"]}


def test_public_api_is_what_the_metric_page_explains():
    """evaldag.engine.__all__ and the page's "API on this page" list are the same names, and each imports."""
    import evaldag.engine as engine

    section = re.search(r"## The API on this page\n(.*?)(?=\n## |\Z)", DOC.read_text(), re.S).group(1)
    assert set(re.findall(r"`([A-Za-z_]+)`", section)) == set(engine.__all__)
    assert all(hasattr(engine, name) for name in engine.__all__)


def test_worked_example_runs_twice_in_a_row_on_one_cache(tmp_path, capsys, monkeypatch):
    """A notebook cell runs again: the page's asserts hold on the second run (all cached) too."""
    monkeypatch.chdir(ROOT)
    text = DOC.read_text()
    _, toy_model, example = _section_blocks(text, "A worked example")
    (second,) = _section_blocks(text, "Asking a second model")
    ns = {"CACHE": str(tmp_path), "__name__": "doc_example"}
    for rerun in (False, True):
        for block in (toy_model, example, second):
            exec(compile(block, str(DOC), "exec"), ns)
        assert ns["fresh"] is not rerun
        assert ns["result"].count("cached") == (5 if rerun else 0) and ns["pair"].ok
    first, again = capsys.readouterr().out.splitlines()
    assert first == again  # the same numbers, from the cache


def test_the_mia_example_matches_the_library_attack(tmp_path, monkeypatch):
    """§ A membership-inference metric: the page's LOSS attack gives mia_loss's AUC on the same rows."""
    from evaldag.engine import HFModel, Rows, run
    from evaldag.metrics.unlearning.mia import mia_loss

    monkeypatch.chdir(ROOT)
    text = DOC.read_text()
    (block,) = _section_blocks(text, "A membership-inference metric")
    ns = {"__name__": "doc_mia"}
    exec("from evaldag.engine import metric, Result\n" + block, ns)
    fix = ROOT / "tests" / "fixtures"
    forget = [json.loads(x) for x in (fix / "tofu_tiny" / "forget10.json").read_text().splitlines() if x.strip()][:4]
    holdout = [json.loads(x) for x in (fix / "tofu_tiny" / "holdout10.json").read_text().splitlines() if x.strip()][:4]
    resources = {"model": HFModel(str(fix / "tiny-llama" / "target")), "data": Rows(lambda: forget),
                 "holdout": Rows(lambda: holdout)}
    res = run([ns["my_mia"](name="mine"), mia_loss(name="library")], resources, cache=tmp_path)
    assert res.ok
    mine, lib = res["mine"], res["library"]
    assert mine.agg_value == pytest.approx(lib.agg_value, abs=0) and 0.0 <= mine.agg_value <= 1.0
    assert mine.extra["forget"] == lib.extra["forget"]


def test_writing_a_backend_minimal_backend_runs(tmp_path, capsys):
    """docs/writing-a-backend.md's minimal backend, run as written: its one number, by hand."""
    text = (ROOT / "docs" / "writing-a-backend.md").read_text()
    blocks = _section_blocks(text, "A minimal backend")
    ns = {"CACHE": str(tmp_path), "__name__": "doc_backend"}
    for block in blocks:
        exec(compile(block, "writing-a-backend.md", "exec"), ns)
    # "Answer: " + "bbc" + eos: after " " comes "b" (-1), after "b" "b" (0), "c" (-1), then eos (-1)
    assert float(capsys.readouterr().out) == pytest.approx(np.exp(-3 / 4), rel=1e-6)
    assert ns["result"]["p"].agg_value == pytest.approx(np.exp(-3 / 4), rel=1e-6)
