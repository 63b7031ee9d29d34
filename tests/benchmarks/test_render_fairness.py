"""The report's "Embedding fairness" section: the numbers of WEAT_EVAL.json, one bar per word.

Two real ``evaldag run weat`` runs on the WEFE fixture vectors: the standard queries
(WEAT 1-10; 4, 5 and 10 are NaN on this 315-word subset, with a reason), and a query
file of (2, 1) queries so RND, ECT and RIPA run too, one of them with a RIPA that fails
and one over the lost-vocabulary threshold. Every number the section shows is checked
against the JSON file it came from.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from evaldag.benchmarks.weat import spec
from evaldag.engine import cli
from evaldag.benchmarks.weat import report as fairness_html
from evaldag.engine.report import build_report_html
from evaldag.metrics.fairness.query import Query

FIX = Path(__file__).parents[1] / "fixtures"
NPZ = FIX / "wefe" / "wefe_subset.npz"
TEST_SETS = json.loads((FIX / "wefe" / "wefe_word_sets.json").read_text())
NAN_ON_FIXTURE = {"weat4_eur_afr_names_2", "weat5_eur_afr_names_2_nosek", "weat10_young_old_names"}


def run_weat(out: Path, cache: Path, *extra: str) -> int:
    return cli.main(["run", "weat", "--embeddings", str(NPZ), "--out", str(out), "--cache-dir", str(cache), "--quiet", *extra])


def custom_queries(path: Path) -> Path:
    """(2, 1) queries (RND, MAC, ECT, RIPA), one RIPA cannot pair, one over the OOV threshold, WEAT 1."""
    w6 = TEST_SETS["weat6_names_career_family"]
    male, female = w6["target_sets"]
    oov = dict(TEST_SETS["oov_over_threshold"])
    oov.update(template=[2, 1], attribute_sets=oov["attribute_sets"][:1], attribute_sets_names=oov["attribute_sets_names"][:1])
    oov.pop("query_name")
    queries = {
        "career_only": {"target_sets": {"Male names": male, "Female names": female}, "attribute_sets": {"Career": w6["attribute_sets"][0]}},
        "unpaired": {"target_sets": {"Male names": male, "Some female names": female[:5]}, "attribute_sets": {"Family": w6["attribute_sets"][1]}},
        "oov": oov,
        "weat1_flowers_insects": TEST_SETS["weat1_flowers_insects"],
    }
    path.write_text(json.dumps(queries))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("weat_report")
    std, custom = base / "standard", base / "custom"
    assert run_weat(std, base / "cache") == 0
    assert run_weat(custom, base / "cache", "--queries", str(custom_queries(base / "q.json"))) == 1  # RIPA on 'unpaired' fails
    return std, custom


def evals(out: Path) -> dict:
    return json.loads((out / "WEAT_EVAL.json").read_text())


def fair_table(page: str) -> tuple[list[str], list[tuple[str, list[tuple[str, str, str]]]]]:
    """(column headers, [(query id, [(data-sort, text, title) per cell])]) of the fairness table."""
    table = re.search(r'<table class="ed-table ed-sortable ed-fair".*?</table>', page, re.S).group(0)
    heads = [re.sub(r"<[^>]+>", " ", h).split() for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]
    rows = []
    for qid, body in re.findall(r'<tr><td><a href="#[^"]+">([^<]+)</a>.*?</td>(.*?)</tr>', table, re.S):
        cells = re.findall(r'<td class="ed-num[^"]*" data-sort="([^"]*)"(?: title="([^"]*)")?>([^<]*)</td>', body)
        rows.append((html.unescape(qid), [(s, html.unescape(text), html.unescape(title)) for s, title, text in cells]))
    return [" ".join(h) for h in heads], rows


def block(page: str, qid: str) -> str:
    return re.search(rf'<details class="ed-more ed-fair-q" id="[^"]+" data-query="{re.escape(qid)}".*?</details>', page, re.S).group(0)


def bars(part: str, kind: str) -> list[list[tuple[str, float]]]:
    """Per chart of ``kind``: its bars' (word, value) in drawing order."""
    svgs = re.findall(rf'<svg[^>]*data-plot="{kind}".*?</svg>', part, re.S)
    return [[(html.unescape(w), float(v)) for w, v in re.findall(r'<g class="ed-bar" data-word="([^"]*)" data-value="([^"]*)">', s)]
            for s in svgs]


# ---------------------------------------------------------------------- the shipped word sets
def test_shipped_word_sets_are_caliskan_weat_1_to_10():
    raw = json.loads(spec.WORD_SETS.read_text())
    assert list(raw) == list(spec.STANDARD_QUERIES) == list(spec.load_queries())
    assert [re.match(r"weat(\d+)_", q).group(1) for q in raw] == [str(i) for i in range(1, 11)]
    shape = ["query_name", "template", "target_sets_names", "attribute_sets_names", "target_sets", "attribute_sets"]
    for qid, entry in raw.items():
        assert list(entry) == shape, qid
        q = Query.model_validate(entry)
        assert q.template == tuple(entry["template"]) == (2, 2) and q.query_name == entry["query_name"], qid
    for test_only in ("three_targets_pleasant", "oov_over_threshold", "oov_under_threshold", "rnsb_gender_bingliu",
                      "docs_gender_family_career"):
        assert test_only not in raw and test_only in TEST_SETS
    for qid in set(raw) - NAN_ON_FIXTURE:  # the others are the fixture's queries, word for word
        assert raw[qid] == TEST_SETS[qid], qid
    assert raw["weat4_eur_afr_names_2"]["attribute_sets"] == raw["weat3_eur_afr_names"]["attribute_sets"]
    assert raw["weat5_eur_afr_names_2_nosek"]["target_sets"] == raw["weat4_eur_afr_names_2"]["target_sets"]
    assert raw["weat5_eur_afr_names_2_nosek"]["attribute_sets"] == raw["weat10_young_old_names"]["attribute_sets"]


def test_standard_run_on_the_fixture_nan_only_where_words_are_missing(runs):
    std, _ = runs
    lookup = json.loads((std / "WEAT_LOOKUP.json").read_text())
    assert list(lookup) == list(spec.STANDARD_QUERIES)
    assert {q for q, v in lookup.items() if v["reason"]} == NAN_ON_FIXTURE
    for qid in NAN_ON_FIXTURE:
        assert "lost_vocabulary_threshold" in lookup[qid]["reason"]
        # NaN is written as null (not JSON otherwise), its reason beside it
        assert all(m["result"] is None and m["reason"] == lookup[qid]["reason"] for m in evals(std)[qid].values())


# ---------------------------------------------------------------------- one run
def test_table_shows_the_eval_numbers(runs):
    std, _ = runs
    page = build_report_html([std])
    ev = evals(std)
    heads, rows = fair_table(page)
    assert heads == ["query", "WEAT", "WEAT effect size", "WEAT p-value", "RNSB", "MAC"]
    assert [q for q, _ in rows] == list(ev) == list(spec.STANDARD_QUERIES)
    fields = [("WEAT", "result"), ("WEAT", "effect_size"), ("WEAT", "p_value"), ("RNSB", "result"), ("MAC", "result")]
    for qid, cells in rows:
        assert len(cells) == len(fields)
        for (metric, key), (sort, text, title) in zip(fields, cells):
            value = ev[qid][metric][key]
            if value is None or math.isnan(value):
                assert (sort, text, title) == ("", "NaN", ev[qid][metric]["reason"]), (qid, metric)
            else:
                assert float(sort) == value and title == repr(value), (qid, metric, key)
    assert 'href="#fairness">Embedding fairness</a>' in page and '<h2 id="fairness">' in page


def test_summary_numbers_are_not_listed_twice(runs):
    std, _ = runs
    page = build_report_html([std])
    summary = json.loads((std / "WEAT_SUMMARY.json").read_text())
    assert len(summary) == 30
    assert 'class="ed-table ed-sortable ed-metrics" data-bench="WEAT"' not in page
    assert f"Its {len(summary)} headline numbers (query/metric) are in the" in page


def test_one_bar_per_word_with_the_eval_value(runs):
    std, _ = runs
    page = build_report_html([std])
    ev = evals(std)
    assert page.count('<details class="ed-more ed-fair-q"') == len(ev)
    assert re.search(r'<details class="ed-more ed-fair-q" id="[^"]+" data-query="weat1_flowers_insects" open>', page)
    for qid, metrics in ev.items():
        part = block(page, qid)
        if qid in NAN_ON_FIXTURE:
            assert 'class="ed-bar"' not in part and "(no per-word values)" in part
            assert html.escape(metrics["WEAT"]["reason"]) in part
            continue
        (weat,) = bars(part, "weat-s")
        s_by_word = metrics["WEAT"]["s_by_word"]
        expect = [(w, v) for words in s_by_word.values() for w, v in words.items()]
        assert len(weat) == sum(len(ws) for ws in s_by_word.values()) and sorted(weat) == sorted(expect), qid
        assert [v for _, v in weat] == sorted((v for _, v in weat), reverse=True)
        part_weat = re.search(r'<svg[^>]*data-plot="weat-s".*?</svg>', part, re.S).group(0)
        assert part_weat.count('class="ed-mark"') == 2  # the two sets' mean s
        (rnsb,) = bars(part, "rnsb-p")
        assert sorted(rnsb) == sorted(metrics["RNSB"]["negative_sentiment_probabilities"].items()), qid
        (mac,) = bars(part, "mac-d")
        te = metrics["MAC"]["targets_eval"]
        means = {w: sum(d.values()) / len(d) for words in te.values() for w, d in words.items()}
        assert len(mac) == len(means) and all(v == pytest.approx(means[w], abs=1e-12) for w, v in mac), qid
        assert sum(v for _, v in mac) / len(mac) == pytest.approx(metrics["MAC"]["mac"], abs=1e-9)
    lost = block(page, "weat2_instruments_weapons")
    assert "Not in the embeddings (left out): Weapons: 1 of 25 (axe)" in lost


def test_weat_bars_are_coloured_by_target_set(runs):
    std, _ = runs
    part = block(build_report_html([std]), "weat1_flowers_insects")
    svg = re.search(r'<svg[^>]*data-plot="weat-s".*?</svg>', part, re.S).group(0)
    fills = dict(re.findall(r'data-word="([^"]*)".*?<rect [^>]*fill="(#[0-9a-f]+)"', svg))
    flowers, insects = evals(std)["weat1_flowers_insects"]["WEAT"]["s_by_word"].values()
    assert {fills[w] for w in flowers} == {fairness_html.SET_COLORS[0]}
    assert {fills[w] for w in insects} == {fairness_html.SET_COLORS[1]}


# ---------------------------------------------------------------------- (2, 1) queries: RND, ECT, RIPA
def test_rnd_ripa_ect_failed_and_nan(runs):
    _, custom = runs
    page = build_report_html([custom])
    ev = evals(custom)
    heads, rows = fair_table(page)
    assert heads == ["query", "WEAT", "WEAT effect size", "WEAT p-value", "RND", "RNSB", "MAC", "ECT", "RIPA"]
    row = dict(rows)
    assert float(row["career_only"][3][0]) == ev["career_only"]["RND"]["result"]
    assert float(row["career_only"][6][0]) == ev["career_only"]["ECT"]["result"]
    assert ev["unpaired"]["RIPA"]["status"] == "failed"
    assert row["unpaired"][7][1] == "failed" and row["unpaired"][7][2] == ev["unpaired"]["RIPA"]["reason"]
    assert [c[1] for c in row["oov"][3:]] == ["NaN", "", "NaN", "NaN", "NaN"]

    part = block(page, "career_only")
    (rnd,) = bars(part, "rnd-d")
    assert sorted(rnd) == sorted(ev["career_only"]["RND"]["distance_by_word"].items())
    (ripa,) = bars(part, "ripa-w")
    wv = ev["career_only"]["RIPA"]["word_values"]
    assert sorted(ripa) == sorted((w, d["mean"]) for w, d in wv.items())
    assert re.search(r'<svg[^>]*data-plot="ripa-w".*?</svg>', part, re.S).group(0).count("stroke=\"#334155\" stroke-width=\"1\"") == len(wv)
    assert "ECT is a rank correlation" in part and not bars(part, "ect")
    assert "(no per-word values)" in block(page, "oov") and "Insects+OOV" in block(page, "oov")


def test_rnd_colours_follow_the_distance():
    q = fairness_html._Query({"RND": {"distance_by_word": {"near_t1": -0.5, "near_t2": 0.25}}},
                             {"targets": [{"name": "T one"}, {"name": "T two"}], "attributes": [{"name": "A"}]})
    c1, c2 = fairness_html.SET_COLORS[:2]
    for distance, expect in (("norm", {"near_t1": c1, "near_t2": c2}), ("cos", {"near_t1": c2, "near_t2": c1})):
        svg, _ = fairness_html._rnd(q, q.fields["RND"], distance)
        fills = dict(re.findall(r'data-word="([^"]*)".*?<rect [^>]*fill="(#[0-9a-f]+)"', svg))
        assert fills == expect, distance
    svg, _ = fairness_html._rnd(q, q.fields["RND"], None)  # no run.json: the sign's meaning is unknown
    assert set(re.findall(r'<rect [^>]*fill="(#[0-9a-f]+)"', svg)) == {fairness_html.GREY}


# ---------------------------------------------------------------------- several runs, no WEAT
def test_several_runs_side_by_side(runs):
    std, custom = runs
    page = build_report_html([std, custom])
    assert page == build_report_html([std, custom])
    heads, rows = fair_table(page)
    assert heads[:3] == ["query", "WEAT standard", "WEAT custom"]
    assert "RND custom" in heads and "RND standard" not in heads  # no empty columns
    assert [q for q, _ in rows] == list(spec.STANDARD_QUERIES) + ["career_only", "unpaired", "oov"]
    w1 = dict(rows)["weat1_flowers_insects"]
    assert w1[0][0] == w1[1][0] == repr(evals(std)["weat1_flowers_insects"]["WEAT"]["result"])
    part = block(page, "weat1_flowers_insects")
    assert "<h4>standard</h4>" in part and "<h4>custom</h4>" in part and len(bars(part, "weat-s")) == 2
    assert "<h4>custom</h4>" not in block(page, "weat2_instruments_weapons")


def test_no_fairness_section_without_a_weat_run(tmp_path):
    ou = tmp_path / "ou"
    ou.mkdir()
    shutil.copy(FIX / "open_unlearning" / "target_MUSE_EVAL.json", ou / "MUSE_EVAL.json")
    page = build_report_html([ou])
    assert 'id="fairness"' not in page and "Embedding fairness" not in page and 'class="ed-table ed-sortable ed-fair"' not in page
