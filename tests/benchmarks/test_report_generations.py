"""The report's "Generations" section: the first items' greedy answers beside the gold ones."""

import json
import shutil
from pathlib import Path

from evaldag.benchmarks.unlearning.report import generations_html
from evaldag.engine.report import write_report_html
from evaldag.engine.render.report_html import load_run_folder

FIX = Path(__file__).parents[1] / "fixtures" / "open_unlearning"


def folders(tmp: Path) -> list[Path]:
    out = []
    for who in ("target", "retain"):
        d = tmp / who
        d.mkdir()
        for kind in ("EVAL", "SUMMARY"):
            shutil.copy(FIX / f"{who}_TOFU_{kind}.json", d / f"TOFU_{kind}.json")
        out.append(d)
    return out


def test_first_items_beside_gold_for_each_run(tmp_path):
    target, retain = folders(tmp_path)
    runs = [load_run_folder(target), load_run_folder(retain)]
    for r in runs:
        r.title = r.path.name
    html = generations_html(runs, shown=3)
    evals = {d.name: json.loads((d / "TOFU_EVAL.json").read_text()) for d in (target, retain)}
    generating = sorted(k for k, e in evals["target"].items()
                        if isinstance(e.get("value_by_index"), dict)
                        and "generation" in next(iter(e["value_by_index"].values()), {}))
    assert generating and [f"<h3>{n}</h3>" in html for n in generating] == [True] * len(generating)
    rouge = {who: e["forget_Q_A_ROUGE"]["value_by_index"] for who, e in evals.items()}
    first = list(rouge["target"])[:3]
    from html import escape
    for k in first:
        row = f"<tr><td>{k}</td>"
        assert row in html
        for who in ("target", "retain"):
            assert escape(rouge[who][k]["generation"][:200]) in html
        assert escape(rouge["target"][k]["ground_truth"][:200]) in html
    assert f"<tr><td>{list(rouge['target'])[3]}</td>" not in html.split("<h3>forget_Q_A_ROUGE</h3>")[1].split("<h3>")[0]


def test_the_report_has_the_section(tmp_path):
    report = write_report_html(folders(tmp_path), tmp_path / "report.html").read_text()
    assert 'id="generations"' in report and "<h3>forget_Q_A_ROUGE</h3>" in report


def test_no_generations_no_section(tmp_path):
    d = tmp_path / "probs"
    d.mkdir()
    (d / "TOFU_EVAL.json").write_text(json.dumps({"forget_Q_A_Prob": {"agg_value": 0.5, "value_by_index": {"0": {"prob": 0.5}}}}))
    assert generations_html([load_run_folder(d)]) == ""


def test_evaldag_report_generations_prints_them_in_the_terminal_and_writes_nothing(tmp_path, capsys):
    from evaldag.engine.cli import main

    target, retain = folders(tmp_path)
    rouge = json.loads((target / "TOFU_EVAL.json").read_text())["forget_Q_A_ROUGE"]["value_by_index"]
    assert main(["report", str(target), str(retain), "--generations", "2"]) == 0
    out = capsys.readouterr().out
    assert not (target / "report.html").exists()
    block = out.split(f"== forget_Q_A_ROUGE · {target}\n")[1].split("\n== ")[0]
    k0, k1, k2 = list(rouge)[:3]
    v, one = rouge[k0], lambda text: text.replace("\n", "\\n")  # each field on one line: newlines shown as \n
    assert "\n" in v["input"]
    assert block.startswith(f"  [{k0}] {one(v['input'])}\n    gold: {one(v['ground_truth'])}\n"
                            f"    said: {one(v['generation'])}\n  [{k1}] ")
    assert f"[{k2}]" not in block
    assert f"== forget_Q_A_ROUGE · {retain}\n" in out
    # a run without generations says so in one line
    d = tmp_path / "probs"
    d.mkdir()
    (d / "TOFU_EVAL.json").write_text(json.dumps({"forget_Q_A_Prob": {"agg_value": 0.5, "value_by_index": {"0": {"prob": 0.5}}}}))
    assert main(["report", str(d), "--generations"]) == 0
    assert capsys.readouterr().out == f"{d}: no generations (no metric of this run generates)\n"
