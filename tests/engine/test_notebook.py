"""Notebooks: objects display themselves, repr is one line, the config takes
the CLI's metric words, write_report writes a report."""

import json

import pytest

from evaldag.benchmarks.toy import ToyBenchmark, ToyConfig
from evaldag.engine import Graph, Result, run, write_outputs, write_report


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    nodes, res = ToyBenchmark().build(ToyConfig())
    return run(nodes, res, cache=tmp_path_factory.mktemp("cache"))


def test_repr_of_a_run_result_is_one_short_line(toy):
    text = repr(toy)
    n = len(toy.records)
    assert text == f"<RunResult ok=True nodes={n} ({n} computed) wall={toy.wall_seconds:.2f}s>"
    assert "\n" not in text and len(text) < 120


def test_a_run_result_shows_its_metrics_table_and_its_dag(toy):
    page = toy._repr_html_()
    summary = toy.summary("TOY")
    for name, value in summary.items():
        assert f"<td>{name}</td><td style='text-align:right'>{value:.6g}</td><td>computed</td>" in page
    assert page.count("<svg") == 1 and "data-nodes=" in page and "ed-node" in page


def test_a_graph_and_a_result_and_a_benchmark_display_themselves(toy):
    svg = Graph(ToyBenchmark().plan(ToyConfig()))._repr_svg_()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    r = Result(0.25, {"0": 1, "1": 2}, extra={"auc": 0.5}, reason="because")
    html = r._repr_html_()
    for cell in ("<th style='text-align:left'>agg_value</th><td>0.25</td>", "<th style='text-align:left'>items</th><td>2</td>",
                 "<th style='text-align:left'>auc</th><td>0.5</td>", "<td>because</td>"):
        assert cell in html
    plan = ToyBenchmark()._repr_html_()
    assert plan.startswith("<svg") and "toy_probability" in plan


def test_tofu_config_takes_the_words_the_cli_takes():
    from evaldag.benchmarks.tofu.benchmark import TofuBenchmark
    from evaldag.benchmarks.tofu.config import MIA_METRICS, TofuConfig
    from evaldag.benchmarks.muse.config import MuseConfig

    from evaldag.benchmarks.unlearning.classifier import CLASSIFIER_METRICS

    menu = TofuBenchmark().metric_menu()
    # `all` as the CLI reads it: the gibberish metric only with a classifier, mia_reference only with a
    # reference (or retain) model
    without = tuple(m for m in menu.all if m not in CLASSIFIER_METRICS and m != "mia_reference")
    assert TofuConfig(metrics=("all",)).metrics == without and len(without) == len(menu.all) - 2
    assert "mia_reference" in TofuConfig(metrics=("all",), retain_model="r").metrics
    assert "mia_reference" in TofuConfig(metrics=("all", "mia_reference")).metrics  # named outright: kept (and refused at run)
    assert TofuConfig(metrics=("all",), classifier_model="clf", reference_model="ref").metrics == \
        menu.parse("all", bench="tofu") == tuple(menu.all)
    assert TofuConfig(metrics=("forget_quality", "mia")).metrics == ("forget_quality", *MIA_METRICS)
    assert TofuConfig(metrics="default").metrics == menu.default
    assert MuseConfig(metrics=("mia",)).metrics == MIA_METRICS
    with pytest.raises(ValueError, match="unknown tofu metric 'forget_qualty'"):
        TofuConfig(metrics=("forget_qualty",))


def test_write_report_writes_the_report_and_write_outputs_the_files(toy, tmp_path):
    paths = write_report(toy, tmp_path / "a")
    assert (tmp_path / "a" / "report.html") in paths and (tmp_path / "a" / "report.html").exists()
    assert "toy_probability" in (tmp_path / "a" / "report.html").read_text()
    assert json.loads((tmp_path / "a" / "TOY_SUMMARY.json").read_text()) == pytest.approx(toy.summary("TOY"))
    write_outputs(toy, tmp_path / "b")
    assert (tmp_path / "b" / "TOY_SUMMARY.json").exists() and not (tmp_path / "b" / "report.html").exists()
