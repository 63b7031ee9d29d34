"""A sequence cut to the model's context is recorded per item and warned about."""

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


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_mia_truth_ratio_normalised_and_rouge_note_the_cut(tmp_path: Path, capsys) -> None:
    from transformers import AutoTokenizer  # heavy; only these tests need it

    data = tmp_path / "data"
    shutil.copytree(FIX / "tofu_tiny", data)
    long_text = ("The author wrote about rivers, salt and cities. " * 300)[:10_000]
    forget = _rows(data / "forget10_perturbed.json")
    forget[2]["answer"] = long_text  # MIA forget side
    forget[2]["paraphrased_answer"] = long_text[:6_000]  # truth ratio's correct side
    _write(data / "forget10_perturbed.json", forget)
    ra = _rows(data / "real_authors_perturbed.json")
    ra[1]["answer"] = long_text[:8_000]  # ra_Q_A_Prob: normalised probability and ra truth ratio
    _write(data / "real_authors_perturbed.json", ra)

    tok = AutoTokenizer.from_pretrained(TARGET)

    def cut(question: str, answer: str) -> int:  # the default template, tokenized whole, minus the 512 kept
        return len(tok("Question: " + question + "\n" + "Answer: " + answer)["input_ids"]) - 512

    n_mia, n_tr, n_ra = cut(forget[2]["question"], forget[2]["answer"]), cut(forget[2]["question"], forget[2]["paraphrased_answer"]), cut(ra[1]["question"], ra[1]["answer"])
    assert min(n_mia, n_tr, n_ra) > 100 and len({n_mia, n_tr, n_ra}) == 3

    out = tmp_path / "out"
    metrics = "mia_loss,mia_min_k,mia_reference,mia_gradnorm,forget_truth_ratio,ra_Q_A_Prob_normalised,ra_Truth_Ratio,forget_Q_A_ROUGE,forget_Q_A_PARA_ROUGE"
    code = cli.main(["run", "tofu", "--model", str(TARGET), "--reference-model", str(TARGET), "--data", str(data),
                     "--metrics", metrics, "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    ev = json.loads((out / "TOFU_EVAL.json").read_text())

    def noted(vbi: dict) -> dict:
        return {k: v["truncated_tokens"] for k, v in vbi.items() if "truncated_tokens" in v}

    for name in ("mia_loss", "mia_min_k", "mia_reference", "mia_gradnorm"):
        assert noted(ev[name]["forget"]["value_by_index"]) == {"2": n_mia}, name
        assert noted(ev[name]["holdout"]["value_by_index"]) == {}, name
    assert noted(ev["forget_truth_ratio"]["value_by_index"]) == {"2": n_tr}
    assert noted(ev["ra_Q_A_Prob_normalised"]["value_by_index"]) == {"1": n_ra}
    assert noted(ev["ra_Truth_Ratio"]["value_by_index"]) == {"1": n_ra}
    assert noted(ev["forget_Q_A_ROUGE"]["value_by_index"]) == {"2": n_mia}  # its ground truth is the cut labels
    assert noted(ev["forget_Q_A_PARA_ROUGE"]["value_by_index"]) == {"2": n_tr}
    printed = capsys.readouterr().out
    for name, n in (("mia_loss", n_mia), ("mia_reference", n_mia), ("forget_truth_ratio", n_tr), ("ra_Q_A_Prob_normalised", n_ra), ("forget_Q_A_ROUGE", n_mia)):
        assert f"warning: TOFU/{name}: 1 items truncated to the model's context (up to {n} tokens cut)" in printed
