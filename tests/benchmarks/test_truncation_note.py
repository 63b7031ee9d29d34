"""A sequence cut to the model's context is recorded per item and warned about (issue 11.6)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from evaldag.engine import cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TARGET = FIX / "tiny-llama" / "target"


def test_long_answer_is_noted_in_eval_and_terminal(tmp_path: Path, capsys) -> None:
    from transformers import AutoTokenizer  # heavy; only this test needs it

    data = tmp_path / "data"  # the forget metrics read forget10_perturbed.json
    shutil.copytree(FIX / "tofu_tiny", data)
    rows = [json.loads(line) for line in (data / "forget10_perturbed.json").read_text().splitlines() if line.strip()]
    long_answer = ("The author wrote about rivers, salt and cities. " * 300)[:10_000]
    rows[2]["answer"] = long_answer
    (data / "forget10_perturbed.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

    # hand count: the default template's prompt + answer, tokenized whole, minus the 512 kept
    tok = AutoTokenizer.from_pretrained(TARGET)
    text = "Question: " + rows[2]["question"] + "\n" + "Answer: " + long_answer
    expected = len(tok(text)["input_ids"]) - 512
    assert expected > 1000

    out = tmp_path / "out"
    code = cli.main(["run", "tofu", "--model", str(TARGET), "--data", str(data), "--metrics", "forget_Q_A_Prob",
                     "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    vbi = json.loads((out / "TOFU_EVAL.json").read_text())["forget_Q_A_Prob"]["value_by_index"]
    assert vbi["2"]["truncated_tokens"] == expected
    assert [k for k, v in vbi.items() if "truncated_tokens" in v] == ["2"]
    printed = capsys.readouterr().out
    assert (f"warning: TOFU/forget_Q_A_Prob: 1 items truncated to the model's context (up to {expected} tokens cut); "
            "see value_by_index[...].truncated_tokens in TOFU_EVAL.json") in printed
