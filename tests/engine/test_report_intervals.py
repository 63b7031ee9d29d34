"""The report's metrics tables with each value's interval beside it, where the run wrote
``<GROUP>_INTERVALS_EVAL.json``: the percentile interval in brackets (honest when it is not
symmetric), its level and resample count once in the table's caption; a run without one
renders its tables as before."""

import json
import re

from evaldag.engine.report import build_report_html

EVAL = {"forget_Q_A_Prob": {"agg_value": 0.9821}, "model_utility": {"agg_value": 0.5123}, "forget_truth_ratio": {"agg_value": 0.61}}
IVS = {"forget_Q_A_Prob": {"agg_value": 0.9821, "percentile": [0.9704, 0.9899], "BCa": [0.97, 0.99], "confidence_level": 0.95,
                           "n_resamples": 200, "seed": 5, "n_items": {"forget": 12}},
       "model_utility": {"agg_value": 0.5123, "percentile": [0.41, 0.5333], "BCa": None, "confidence_level": 0.95,
                         "n_resamples": 200, "seed": 5, "n_items": {"retain": 12}}}


def _folder(tmp_path, name, intervals):
    d = tmp_path / name
    d.mkdir()
    (d / "TOFU_EVAL.json").write_text(json.dumps(EVAL))
    (d / "TOFU_SUMMARY.json").write_text(json.dumps({"model_utility": 0.5123}))
    if intervals:
        (d / "TOFU_INTERVALS_EVAL.json").write_text(json.dumps(IVS))
    (d / "run.json").write_text(json.dumps({"benchmarks": ["tofu"]}))
    return d


def _tofu_table(html):
    return re.search(r'<table[^>]*data-bench="TOFU">.*?</table>', html, re.S).group(0)


def _row(table, metric):
    return re.search(rf"<tr[^>]*><td>{metric}</td>.*?</tr>", table, re.S).group(0)


def test_each_value_shows_its_interval_and_the_caption_its_level_and_resamples(tmp_path):
    table = _tofu_table(build_report_html([_folder(tmp_path, "run", True)]))
    assert '<span class="ed-ci">[0.9704, 0.9899]</span>' in _row(table, "forget_Q_A_Prob")
    assert '<span class="ed-ci">[0.41, 0.5333]</span>' in _row(table, "model_utility")  # a SUMMARY (headline) row too
    assert 'class="ed-ci"' not in _row(table, "forget_truth_ratio")  # no interval written for it: the number alone
    caption = re.search(r"<caption[^>]*>(.*?)</caption>", table, re.S).group(1)
    assert "95% percentile bootstrap intervals" in caption and "200 resamples" in caption
    assert table.count("<caption") == 1


def test_a_run_without_intervals_shows_none_and_renders_as_before(tmp_path):
    plain = build_report_html([_folder(tmp_path, "run", False)])
    table = _tofu_table(plain)
    assert 'class="ed-ci"' not in plain and "<caption" not in table
    assert re.search(r'<td class="ed-num" data-sort="0.9821" title="0.9821">0.9821</td>', _row(table, "forget_Q_A_Prob"))


def test_two_runs_one_with_intervals_each_column_its_own(tmp_path):
    html = build_report_html([_folder(tmp_path, "a", False), _folder(tmp_path, "b", True)])
    row = _row(_tofu_table(html), "forget_Q_A_Prob")
    assert row.count('class="ed-ci"') == 1
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[2] == "0.9821" and cells[3].startswith("0.9821") and "[0.9704, 0.9899]" in cells[3]
    assert cells[4] == "+0"  # the delta column as before


def _mia(forget, holdout):
    side = lambda xs: {"value_by_index": {str(i): {"score": x} for i, x in enumerate(xs)}}  # noqa: E731
    return {"agg_value": 0.875, "auc": 0.875, "forget": side(forget), "holdout": side(holdout)}


def test_the_roc_legend_gives_each_auc_its_interval_where_written(tmp_path):
    d = _folder(tmp_path, "run", True)
    evals = {**EVAL, "mia_min_k": _mia([0.1, 0.2, 0.6, 0.7], [0.3, 0.8, 0.9, 0.95]),
             "mia_loss": _mia([0.1, 0.2, 0.6, 0.7], [0.3, 0.8, 0.9, 0.95])}
    (d / "TOFU_EVAL.json").write_text(json.dumps(evals))
    ivs = {**IVS, "mia_min_k": {"agg_value": 0.875, "percentile": [0.4375, 1.0], "confidence_level": 0.95, "n_resamples": 200}}
    (d / "TOFU_INTERVALS_EVAL.json").write_text(json.dumps(ivs))
    html = build_report_html([d])
    roc = html[html.index('data-plot="roc"'):]
    roc = roc[: roc.index("</svg>")]
    assert ">mia_min_k · AUC 0.875 [0.438, 1.000]</text>" in roc  # the interval file's bounds beside the AUC
    assert ">mia_loss · AUC 0.875</text>" in roc  # no interval written for it: the AUC alone
