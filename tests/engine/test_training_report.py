"""The report's Training curves: a metric against the step, and forget quality (log) against
model utility with the retain model, the target and the Pareto front, from run folders."""

import json
import re

from evaldag.engine.render.curves import tradeoff_svg
from evaldag.engine.report import build_report_html

# (folder, model path, forget_quality, model_utility): steps from the checkpoint-N names
RUNS = [("checkpoint-4", "ck/checkpoint-4", 0.01, 0.70), ("checkpoint-8", "ck/checkpoint-8", 0.06, 0.62),
        ("checkpoint-12", "ck/checkpoint-12", 0.30, 0.62), ("checkpoint-16", "ck/checkpoint-16", 0.20, 0.40),
        ("retain", "models/retain", 1.0, 0.65), ("target", "models/target", 1e-9, 0.72)]


def _folders(tmp_path):
    out = []
    for name, model, fq, mu in RUNS:
        d = tmp_path / name
        d.mkdir()
        (d / "TOFU_SUMMARY.json").write_text(json.dumps({"forget_quality": fq, "model_utility": mu}))
        (d / "TOFU_EVAL.json").write_text(json.dumps({"forget_quality": {"agg_value": fq}, "model_utility": {"agg_value": mu}}))
        res = {"model": {"path": model}, "retain_model": {"path": "models/retain"}}
        (d / "run.json").write_text(json.dumps({"benchmarks": ["tofu"], "provenance": {"resources": res}}))
        out.append(d)
    return out


def test_the_report_draws_curves_and_the_tradeoff_with_the_pareto_front(tmp_path):
    html = build_report_html(_folders(tmp_path))
    assert 'id="curves"' in html and "Training curves" in html
    assert html.count('data-plot="curve"') == 2  # forget_quality and model_utility against the step
    trade = html[html.index('data-plot="tradeoff"'):]
    trade = trade[: trade.index("</svg>")]
    kinds = {label: kind for kind, label in re.findall(r'data-kind="(\w+)"><title>([\w-]+):', trade)}
    assert kinds == {"checkpoint-4": "checkpoint", "checkpoint-8": "checkpoint", "checkpoint-12": "checkpoint",
                     "checkpoint-16": "checkpoint", "retain": "reference", "target": "target"}
    assert ">retain model</text>" in trade  # TOFU's reference model, named by the benchmark
    # the front over the checkpoints: 4 (best utility) and 12 (best forget quality); 8 and 16 are beaten by 12
    front = re.search(r'class="ed-front" points="([^"]+)"', trade).group(1).split()
    assert len(front) == 2
    ringed = re.findall(r'stroke="#e11d48" stroke-width="2" class="ed-point" data-kind="\w+"><title>([\w-]+):', trade)
    assert ringed == ["checkpoint-4", "checkpoint-12"]


def test_no_curves_without_steps_and_the_log_scale_floor(tmp_path):
    folders = _folders(tmp_path)
    assert "Training curves" not in build_report_html([folders[4], folders[5]])  # retain and target: no steps
    svg = tradeoff_svg([("a", 0.5, 0.0, "checkpoint"), ("b", 0.6, 1e-3, "checkpoint")], ["b"],
                       x_name="model_utility", y_name="forget_quality")
    assert "1e-3" in svg and "a: model_utility 0.5, forget_quality 0" in svg  # zero drawn at the smallest positive


def test_the_tradeoff_is_the_benchmarks_not_the_engines(tmp_path):
    """The same numbers under a benchmark that declares no trade-off: the curves, no trade-off figure."""
    folders = _folders(tmp_path)
    for d in folders:
        run = json.loads((d / "run.json").read_text())
        (d / "run.json").write_text(json.dumps({**run, "benchmarks": ["toy"]}))
        for kind in ("SUMMARY", "EVAL"):
            (d / f"TOFU_{kind}.json").rename(d / f"TOY_{kind}.json")
    html = build_report_html(folders)
    assert html.count('data-plot="curve"') == 2 and 'data-plot="tradeoff"' not in html
