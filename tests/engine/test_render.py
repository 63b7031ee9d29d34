"""Rendering: the view model, the layout, Mermaid/DOT/JSON/SVG/HTML, the CLI, the run report.

Two graphs are drawn: the toy graph (``evaldag run`` with no arguments) and a
TOFU-shaped graph of ~60 nodes built from the toy metrics plus a few local ones, run
for real on the toy model, so its run.json has every status: computed, cached (a
second run after a param change), failed (a scorer that raises) and skipped.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from evaldag.engine import Graph, Params, Result, Value, Rows, metric, render, run, write_report
from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine import cli
from evaldag.benchmarks.muse.benchmark import MuseBenchmark
from evaldag.engine.report import build_report_html, splits_of
from evaldag.engine.render import layout as layout_mod, plots
from evaldag.engine.render.clusters import cluster_order, guess_split, is_model_like
from evaldag.engine.requests import unpack_token_stats
from evaldag.benchmarks import toy as toy_bench
from evaldag.benchmarks.tofu.benchmark import TofuBenchmark
from evaldag.benchmarks.unlearning.report import per_item

TOFU_SPLITS = splits_of([TofuBenchmark()])  # forget / holdout / retain and TOFU's real authors, world facts

FIXTURES = Path(__file__).parents[1] / "fixtures" / "open_unlearning"
SVG = "{http://www.w3.org/2000/svg}"

# ---------------------------------------------------------------------- a TOFU-shaped graph
from evaldag.metrics import toy as toy_metrics  # noqa: E402  (registers toy_answer_stats, toy_greedy)


def _item_nll(stats) -> list[float]:
    return [float(-np.mean(s.logprob, dtype=np.float64)) for s in unpack_token_stats(stats)]


@metric("tl_prob", version="1", parents={"stats": "toy_answer_stats"}, register=False)
def tl_prob(stats):
    probs = [math.exp(-x) for x in _item_nll(stats)]
    return Result(float(np.mean(probs)), {str(i): {"prob": p} for i, p in enumerate(probs)})


@metric("tl_truth_ratio", version="1", parents={"correct": "toy_answer_stats", "wrong": "toy_answer_stats"}, register=False)
def tl_truth_ratio(correct, wrong):
    tr = [math.exp(c - w) for c, w in zip(_item_nll(correct), _item_nll(wrong))]
    return Result(float(np.mean(tr)), {str(i): {"score": x} for i, x in enumerate(tr)})


@metric("tl_rouge", version="1", parents={"gen": "toy_greedy"}, needs=("data",), register=False)
def tl_rouge(gen, data):
    hits = [len(set(g.split()) & set(r["answer"].split())) / max(1, len(r["answer"].split())) for g, r in zip(gen, data)]
    return Result(float(np.mean(hits)), {str(i): {"rougeL_recall": h} for i, h in enumerate(hits)})


@metric("tl_memorization", version="1", parents={"stats": "toy_answer_stats"}, register=False)
def tl_memorization(stats):
    return Result(float(np.mean([math.exp(-x) for x in _item_nll(stats)]) ** 0.5))


class MiaParams(Params):
    attack: str = "loss"
    k: float = 0.2


@metric("tl_mia", version="1", params=MiaParams, parents={"forget": "toy_answer_stats", "holdout": "toy_answer_stats"}, register=False)
def tl_mia(forget, holdout, params):
    f, h = _item_nll(forget), _item_nll(holdout)
    roc = plots.roc_curve(f, h)
    auc = roc[2] if roc else float("nan")
    side = lambda xs: {"agg_value": float(np.mean(xs)), "value_by_index": {str(i): {"score": x} for i, x in enumerate(xs)}}  # noqa: E731
    return Result(auc, extra={"forget": side(f), "holdout": side(h), "auc": auc})


@metric("tl_gradnorm", version="1", needs=("model", "data"), register=False)
def tl_gradnorm(model, data):
    raise RuntimeError("the toy model has no gradients")
    yield []  # pragma: no cover - makes this a scorer


@metric("tl_harmonic", version="1", register=False)
def tl_harmonic(**parts):
    vals = [p.agg_value for p in parts.values()]
    return Result(len(vals) / sum(1 / max(v, 1e-12) for v in vals))


@metric("tl_vs_logs", version="1", parents={"ours": "tl_truth_ratio"}, needs=("retain_logs",), register=False)
def tl_vs_logs(ours, retain_logs):
    return Result(abs(ours.agg_value - retain_logs["value"]))


def _rows(n: int, offset: int, tag: str = "") -> list[dict]:
    base = toy_bench.ROWS
    out = []
    for i in range(n):
        r = base[(i + offset) % len(base)]
        words = r["answer"].rstrip(".").split()
        out.append({"question": r["question"] + tag + (" " * (i // len(base))), "answer": r["answer"],
                    "paraphrased_answer": " ".join(reversed(words)) + ".", "perturbed_answer": " ".join(words[:-1] + ["nothing"]) + "."})
    return out


def tofu_like_resources(holdout_tag: str = "") -> dict:
    rows = {"tofu_forget": _rows(6, 0), "tofu_retain": _rows(6, 2), "tofu_holdout": _rows(6, 4, holdout_tag),
            "tofu_real_authors": _rows(4, 1), "tofu_world_facts": _rows(4, 3)}
    res = {name: Rows(lambda r=r: r, source=name) for name, r in rows.items()}
    res.update(model=ToyModel(seed=0), reference_model=ToyModel(seed=1), retain_logs=Value({"value": 0.5}))
    return res


def tofu_like_nodes(k: float = 0.2) -> list:
    """~60 vertices shaped like open-unlearning's TOFU eval, plus one vertex shared with a PROBES group."""
    S, G = toy_metrics.toy_answer_stats, toy_metrics.toy_greedy
    nodes = []

    def split(prefix: str, data: str, extra: bool) -> None:
        b = {"data": data}
        stats = S(bind=b)
        nodes.append(tl_prob(name=f"{prefix}_Q_A_Prob", group="TOFU", parents={"stats": stats}))
        nodes.append(tl_prob(name=f"{prefix}_Q_A_PERT_Prob", group="TOFU", parents={"stats": S(field="perturbed_answer", bind=b)}))
        tr_name = {"forget": "forget_truth_ratio"}.get(prefix, f"{prefix}_Truth_Ratio")
        nodes.append(tl_truth_ratio(name=tr_name, group="TOFU", parents={"correct": S(field="paraphrased_answer", bind=b),
                                                                          "wrong": S(field="perturbed_answer", bind=b)}))
        nodes.append(tl_rouge(name=f"{prefix}_Q_A_ROUGE", group="TOFU", parents={"gen": G(bind=b)}, bind=b))
        if extra:
            nodes.append(tl_prob(name=f"{prefix}_Q_A_PARA_Prob", group="TOFU", parents={"stats": S(field="paraphrased_answer", bind=b)}))
            para_gen = G(field="paraphrased_answer", bind=b)
            nodes.append(tl_rouge(name=f"{prefix}_Q_A_PARA_ROUGE", group="TOFU", parents={"gen": para_gen}, bind=b))

    split("forget", "tofu_forget", True)
    split("retain", "tofu_retain", True)
    split("ra", "tofu_real_authors", False)
    split("wf", "tofu_world_facts", False)
    fb, hb = {"data": "tofu_forget"}, {"data": "tofu_holdout"}
    nodes.append(tl_memorization(name="extraction_strength", group="TOFU", parents={"stats": S(bind=fb)}))
    nodes.append(tl_memorization(name="exact_memorization", group="TOFU", parents={"stats": S(field="paraphrased_answer", bind=fb)}))
    for attack, kk in (("loss", 0.2), ("min_k", k), ("zlib", 0.2), ("min_k_plus_plus", 0.2)):
        nodes.append(tl_mia(name=f"mia_{attack}", group="TOFU", attack=attack, k=kk,
                            parents={"forget": S(bind=fb), "holdout": S(bind=hb)}))
    ref = {"model": "reference_model"}
    nodes.append(tl_mia(name="mia_reference", group="TOFU", attack="reference",
                        parents={"forget": S(bind={**fb, **ref}), "holdout": S(bind={**hb, **ref})}))
    nodes.append(tl_mia(name="mia_gradnorm", group="TOFU", attack="gradnorm",
                        parents={"forget": tl_gradnorm(bind=fb), "holdout": tl_gradnorm(bind=hb)}))
    mia_min_k = tl_mia(attack="min_k", k=k, parents={"forget": S(bind=fb), "holdout": S(bind=hb)})
    nodes.append(tl_harmonic(name="privleak", group="TOFU", parents={"mia": mia_min_k}))
    forget_tr = tl_truth_ratio(parents={"correct": S(field="paraphrased_answer", bind=fb), "wrong": S(field="perturbed_answer", bind=fb)})
    nodes.append(tl_vs_logs(name="forget_quality", group="TOFU", parents={"ours": forget_tr}))
    mu = {}
    for prefix, data in (("retain", "tofu_retain"), ("ra", "tofu_real_authors"), ("wf", "tofu_world_facts")):
        b = {"data": data}
        mu[f"{prefix}_prob"] = tl_prob(parents={"stats": S(bind=b)})
        mu[f"{prefix}_rouge"] = tl_rouge(parents={"gen": G(bind=b)}, bind=b)
    nodes.append(tl_harmonic(name="model_utility", group="TOFU", parents=mu))
    nodes.append(tl_prob(name="memorised_answer_prob", group="PROBES", parents={"stats": S(bind=fb)}))
    nodes.append(tl_memorization(name="probe_memorization", group="PROBES", parents={"stats": S(field="perturbed_answer", bind=fb)}))
    return nodes


def run_tofu_like(out: Path, cache: Path):
    """Run, then rerun with another Min-K k and other holdout rows: the holdout scorers and
    the MIAs recompute (reasons data, parent, params), everything else comes from the store."""
    run(tofu_like_nodes(0.2), tofu_like_resources(), cache_dir=str(cache))
    result = run(tofu_like_nodes(0.5), tofu_like_resources(holdout_tag=" Really?"), cache_dir=str(cache))
    write_report(result, out)
    return result


@pytest.fixture(scope="module")
def tofu_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("tofu_like")
    result = run_tofu_like(base / "out", base / "cache")
    return result, base / "out"


# ---------------------------------------------------------------------- helpers
def toy_run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "toy_out"
    write_report(run(toy_bench.nodes(), toy_bench.resources(), cache_dir=str(tmp_path / "toy_cache")), out)
    return out


def svg_nodes(svg_text: str) -> list[ET.Element]:
    root = ET.fromstring(svg_text)
    return [g for g in root.iter(f"{SVG}g") if "ed-node" in (g.get("class") or "").split()]


def mermaid_edges(text: str) -> set[tuple[str, str]]:
    return set(re.findall(r"^\s+(\w+) --> (\w+)$", text, re.M))


# ---------------------------------------------------------------------- the toy graph, each format
def test_toy_plan_in_every_format_agrees():
    nodes = toy_bench.nodes()
    g = Graph(nodes)
    view = render.as_view(g)
    assert [n.status for n in view.nodes] == ["planned"] * 6 and view.mode == "plan"
    names = {n.label for n in view.nodes}
    assert {"toy_probability", "toy_min_k", "toy_first_char_match", "toy_summary"} <= names

    mm = render.to_mermaid(g)
    assert mm.startswith("flowchart LR\n") and "classDef planned" in mm and 'subgraph g0["TOY"]' in mm
    assert mermaid_edges(mm) == {(e.src, e.dst) for e in view.edges} and len(view.edges) == 5
    assert re.search(r"class n0,n1,n2,n3,n4,n5 planned", mm)

    dot = render.to_dot(g)
    assert dot.count("{") == dot.count("}") and "subgraph cluster_0" in dot and 'label="TOY"' in dot
    assert len(re.findall(r"^\s+n\d -> n\d", dot, re.M)) == 5

    data = json.loads(render.to_json(g))
    assert data["mode"] == "plan" and data["counts"] == {"planned": 6} and len(data["edges"]) == 5

    svg = render.to_svg(g)
    assert len(svg_nodes(svg)) == 6
    assert len([p for p in ET.fromstring(svg).iter(f"{SVG}path") if p.get("class") == "ed-edge"]) == 5

    page = render.to_html(nodes)
    assert page.startswith("<!DOCTYPE html>") and page.count('<tr class="ed-row"') == 6
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page


def test_resources_are_hidden_by_default_and_shown_on_request():
    plain, full = render.as_view(toy_bench.nodes()), render.as_view(toy_bench.nodes(), show_resources=True)
    assert not any(n.kind == "resource" for n in plain.nodes)
    res = {n.label: n for n in full.nodes if n.kind == "resource"}
    assert set(res) == {"model", "data"} and all(n.status == "input" for n in res.values())
    reads_data = {full.node(e.dst).label for e in full.edges if e.src == res["data"].id}
    assert {x.split("[")[0] for x in reads_data} == {"toy_answer_stats", "toy_greedy", "toy_first_char_match"}
    assert "([" in render.to_mermaid(full)  # stadium shape for inputs


def test_run_dir_statuses_values_and_warm_rerun(tmp_path):
    out = toy_run_dir(tmp_path)
    view = render.as_view(out)
    assert view.mode == "run" and {n.status for n in view.nodes} == {"computed"}
    evals = json.loads((out / "TOY_EVAL.json").read_text())
    prob = next(n for n in view.nodes if n.label == "toy_probability")
    assert prob.value == evals["toy_probability"]["agg_value"] and prob.seconds is not None and prob.fingerprint
    assert "classDef computed" in render.to_mermaid(out)
    write_report(run(toy_bench.nodes(), toy_bench.resources(), cache_dir=str(tmp_path / "toy_cache")), out)
    warm = render.as_view(out)
    assert {n.status for n in warm.nodes} == {"cached"}
    assert "classDef cached" in render.to_mermaid(out) and "classDef computed" not in render.to_mermaid(out)
    tip = next(t.text for g in svg_nodes(render.to_svg(out)) for t in g.iter(f"{SVG}title") if "toy_probability" in t.text)
    assert f"fingerprint: {prob.fingerprint}" in tip and "value: " in tip


def test_output_is_deterministic(tofu_run, tmp_path):
    result, out = tofu_run
    for fmt in render.FORMATS:
        assert render.render(out, fmt) == render.render(out, fmt)
        assert render.render(tofu_like_nodes(), fmt) == render.render(Graph(tofu_like_nodes()), fmt)
    a = build_report_html([out])
    assert a == build_report_html([out])
    # and across processes with different hash seeds (no set or dict order leaks into the output)
    code = "import sys; from evaldag.engine import render; sys.stdout.write(render.to_html(sys.argv[1]) + render.to_mermaid(sys.argv[1]))"
    pages = {subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(pages) == 1 and pages == {render.to_html(out) + render.to_mermaid(out)}


# ---------------------------------------------------------------------- the TOFU-shaped graph
def test_tofu_like_run_has_every_status_and_reason(tofu_run):
    result, out = tofu_run
    view = render.as_view(out)
    by = {n.label: n for n in view.nodes}
    assert 55 <= len(view.nodes) <= 80
    assert view.counts().keys() == {"computed", "cached", "failed", "skipped"}
    assert by["mia_min_k"].status == "computed" and by["mia_min_k"].reason == "params"
    assert by["mia_gradnorm"].status == "skipped" and "failed" in by["mia_gradnorm"].problem
    assert by["forget_Q_A_Prob"].status == "cached"
    assert sum(n.status == "failed" for n in view.nodes) == 2  # the forget and holdout gradient scorers
    svg = render.to_svg(out)
    statuses = {g.get("data-status") for g in svg_nodes(svg)}
    assert statuses == {"computed", "cached", "failed", "skipped"}
    mm = render.to_mermaid(out)
    for s in ("computed", "cached", "failed", "skipped"):
        assert f"classDef {s} " in mm
    # the in-memory run view agrees with the one read back from run.json
    mem = render.as_view(result)
    assert sorted((n.label, n.status) for n in mem.nodes) == sorted((n.label, n.status) for n in view.nodes)


def test_split_and_group_guesses(tofu_run):
    assert guess_split("forget_Q_A_Prob", TOFU_SPLITS) == "forget" and guess_split("retain_Truth_Ratio", TOFU_SPLITS) == "retain"
    assert guess_split("ra_Q_A_Prob", TOFU_SPLITS) == "ra" and guess_split("wf_Truth_Ratio", TOFU_SPLITS) == "wf"
    assert guess_split("tofu_holdout", TOFU_SPLITS) == "holdout"
    # the engine knows no split word: forget / holdout / retain are the unlearning benchmarks', ra is TOFU's
    assert guess_split("forget_Q_A_Prob") is None and guess_split("ra_Q_A_Prob") is None and splits_of([]) == ()
    assert [s.key for s in splits_of([MuseBenchmark()])] == ["forget", "holdout", "retain"]
    assert [s.key for s in TOFU_SPLITS] == ["forget", "holdout", "retain", "ra", "wf"]
    assert guess_split("extraction_strength") is None and guess_split("model_utility") is None
    assert is_model_like("retain_model") and not is_model_like("tofu_retain")
    view = render.as_view(Graph(tofu_like_nodes()), show_resources=True, splits=TOFU_SPLITS)
    assert [c[1] for c in cluster_order(view) if c[0] == "TOFU"] == ["forget", "holdout", None, "retain", "ra", "wf"]
    split = {n.label: n.split for n in view.nodes if not n.unnamed}
    assert split["forget_truth_ratio"] == "forget" and split["ra_Truth_Ratio"] == "ra"
    assert split["extraction_strength"] == "forget"  # from its parent scorer's bound data
    assert split["model_utility"] is None and split["mia_loss"] is None  # mixes splits
    assert split["tofu_holdout"] == "holdout" and split["model"] is None
    assert split["retain_logs"] == "forget"  # a model-like input sits next to its only reader, forget_quality
    holdout_scorers = [n for n in view.nodes if n.unnamed and n.resources.get("data") == "tofu_holdout"]
    assert holdout_scorers and all(n.split == "holdout" and n.group == "TOFU" for n in holdout_scorers)
    assert {n.group for n in view.nodes if n.label == "probe_memorization"} == {"PROBES"}


def test_shared_node_is_marked_everywhere():
    g = Graph(tofu_like_nodes())
    view = render.as_view(g)
    shared = [n for n in view.nodes if n.shared]
    assert [sorted(n.names) for n in shared] == [["PROBES/memorised_answer_prob", "TOFU/forget_Q_A_Prob"]]
    sid = shared[0].id
    assert shared[0].group is None  # serves two benchmarks: drawn in the shared band
    mm = render.to_mermaid(g)
    assert re.search(rf"^\s+{sid}\[\[\".*forget_Q_A_Prob.*memorised_answer_prob.*shared ×2", mm, re.M)
    assert f"class {sid} shared" in mm
    dot = render.to_dot(g)
    assert re.search(rf"^\s+{sid} \[.*peripheries=2", dot, re.M) and dot.count("peripheries=2") == 1
    marked = [el for el in svg_nodes(render.to_svg(g)) if "ed-shared" in el.get("class").split()]
    assert [el.get("data-id") for el in marked] == [sid]
    assert len([r for r in marked[0] if r.tag == f"{SVG}rect"]) >= 2  # double border
    assert any(t.text == "×2" for t in marked[0].iter(f"{SVG}text"))
    assert "shared ×2" in render.to_html(g)


def enrich_run_json(result, folder: Path) -> None:
    """What docs/graphs-and-reports.md asks report.run_json to add: every name, params, inputs, version."""
    from evaldag.engine.outputs import node_names

    data = json.loads((folder / "run.json").read_text())
    for key, name in node_names(result).items():
        v = result.graph.vertices[key]
        data["nodes"][name].update(
            version=v.metric.version, names=[f"{g}/{n}" if g else n for g, n in v.names],
            params=v.node.params.model_dump(mode="json"),
            params_not_default=v.node.params.model_dump(mode="json", exclude_defaults=True), resources=dict(v.resources))
    (folder / "run.json").write_text(json.dumps(data))


def test_richer_run_json_gives_the_same_view_as_the_live_run(tofu_run, tmp_path):
    """With every name, params and inputs in run.json, the run view from files equals the live one."""
    result, out = tofu_run
    plain = render.as_view(out)
    assert [n.label for n in plain.nodes if n.shared] == ["forget_Q_A_Prob"]  # run.json keeps every name
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    enrich_run_json(result, copy)
    files, live = render.as_view(copy), render.as_view(result)
    assert [n.label for n in files.nodes if n.shared] == ["forget_Q_A_Prob"]
    facts = lambda v: sorted((n.label, n.group, n.split, n.status, n.shared, n.detail()) for n in v.nodes)  # noqa: E731
    assert facts(files) == facts(live)
    holdout = [n for n in files.nodes if n.resources.get("data") == "tofu_holdout"]
    assert len(holdout) == 3 and {n.split for n in holdout} == {"holdout"}  # answer stats, reference model, gradients
    by = {n.label: n for n in files.nodes}
    assert by["mia_min_k"].params_not_default == {"attack": "min_k", "k": 0.5}
    assert render.to_svg(copy) == render.to_svg(result).replace("evaldag run", "evaldag run: copy")


# ---------------------------------------------------------------------- layout
def test_layers_respect_every_edge_and_boxes_do_not_overlap(tofu_run):
    _, out = tofu_run
    for source in (out, render.as_view(Graph(tofu_like_nodes()), show_resources=True)):
        view = render.as_view(source)
        from evaldag.engine.render.svg import view_layout

        lay = view_layout(view)
        for e in view.edges:
            assert lay.layer[e.src] < lay.layer[e.dst], (e.src, e.dst)
            assert lay.pos[e.src][0] < lay.pos[e.dst][0]
        boxes = {n.id: (lay.pos[n.id], lay.size[n.id]) for n in view.nodes}
        ids = sorted(boxes)
        for i, a in enumerate(ids):
            (ax, ay), (aw, ah) = boxes[a]
            for b in ids[i + 1:]:
                (bx, by), (bw, bh) = boxes[b]
                assert abs(ax - bx) >= (aw + bw) / 2 or abs(ay - by) >= (ah + bh) / 2 + 1, (a, b)
        bands = {b.key: b for b in lay.bands}
        for n in view.nodes:
            band = bands[(n.group, n.split)]
            assert band.y0 <= lay.pos[n.id][1] - lay.size[n.id][1] / 2 and lay.pos[n.id][1] + lay.size[n.id][1] / 2 <= band.y1
        assert lay.width < 1700 and lay.height < 3200  # readable on a screen, not a ribbon


def test_crossing_reduction_beats_the_naive_order():
    # two layers, edges a_i -> b_(7-i): the insertion order crosses every pair
    g = nx.DiGraph()
    g.add_nodes_from([f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)])
    g.add_edges_from((f"a{i}", f"b{7 - i}") for i in range(8))
    assert layout_mod.layout(g, sweeps=0).crossings == 28
    assert layout_mod.layout(g).crossings == 0
    # three layers with long edges (dummies take part), a fixed pseudo-random graph
    rng = np.random.default_rng(7)
    h = nx.DiGraph()
    layers = [[f"L{k}_{i}" for i in range(9)] for k in range(4)]
    h.add_nodes_from(n for lay in layers for n in lay)
    for k in range(3):
        for i, u in enumerate(layers[k]):
            for j in rng.choice(9, size=2, replace=False):
                h.add_edge(u, layers[k + 1][int(j)])
    h.add_edge(layers[0][0], layers[3][8])  # a long edge: two dummies
    naive, ours = layout_mod.layout(h, sweeps=0).crossings, layout_mod.layout(h).crossings
    assert naive == 241 and ours <= 38  # 38 today; fewer is welcome, more is a regression
    assert layout_mod.count_crossings([["x", "y"], ["p", "q"]], [("x", "q"), ("y", "p")]) == 1


def test_layout_keeps_bands_contiguous():
    g = nx.DiGraph([("s1", "t1"), ("s2", "t2"), ("s1", "t2")])
    band = {"s1": "A", "t1": "B", "s2": "B", "t2": "A"}.__getitem__
    lay = layout_mod.layout(g, band=band, band_order=["A", "B"])
    assert [b.key for b in lay.bands] == ["A", "B"]
    (a, b) = lay.bands
    assert a.y1 <= b.y0 and all(a.y0 <= lay.pos[n][1] <= a.y1 for n in ("s1", "t2"))


# ---------------------------------------------------------------------- dot binary (optional)
def test_dot_to_svg_needs_the_binary_only_when_asked(monkeypatch):
    text = render.to_dot(toy_bench.nodes())
    if shutil.which("dot"):  # Graphviz is optional: where it is installed, our DOT must parse
        assert render.dot_to_svg(text).count('class="node"') == 6
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="Graphviz 'dot' binary is not installed"):
        render.dot_to_svg(text)


# ---------------------------------------------------------------------- CLI
def test_graph_command_plan_run_and_cache_status(tmp_path, capsys):
    assert cli.main(["graph", "toy"]) == 0
    assert capsys.readouterr().out.startswith("flowchart LR")
    dest = tmp_path / "plan.html"
    assert cli.main(["graph", "toy", "--metrics", "toy_min_k", "--format", "html", "--out", str(dest)]) == 0
    assert dest.read_text().count('<tr class="ed-row"') == 2  # toy_min_k and its scorer
    cache = tmp_path / "c"
    run(toy_bench.nodes(), toy_bench.resources(), cache_dir=str(cache))
    assert cli.main(["graph", "toy", "--format", "json", "--cache-dir", str(cache)]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {"cached": 6}
    out = toy_run_dir(tmp_path)
    assert cli.main(["graph", "--run", str(out), "--format", "svg"]) == 0
    assert len(svg_nodes(capsys.readouterr().out)) == 6
    assert cli.main(["graph", "--run", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such folder" in capsys.readouterr().err  # the one wording for a missing path


def test_report_command_writes_one_file(tmp_path, capsys):
    out = toy_run_dir(tmp_path)
    assert cli.main(["report", str(out)]) == 0
    assert (out / "report.html").exists() and "wrote" in capsys.readouterr().out
    assert cli.main(["report", str(tmp_path / "missing")]) == 2


def test_cli_main_has_graph_and_report(tmp_path, capsys):
    assert cli.main(["graph", "toy", "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph evaldag")
    out = toy_run_dir(tmp_path)
    assert cli.main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 0


def test_graph_draws_only_through_render():
    """Graph has no to_mermaid/to_dot/to_html (graph -> render -> graph was a cycle): render draws a Graph."""
    assert not any(hasattr(Graph, f"to_{fmt}") for fmt in ("mermaid", "dot", "html"))
    g = Graph(toy_bench.nodes())
    assert render.to_mermaid(g).startswith("flowchart LR") and render.to_dot(g).startswith("digraph evaldag")


# ---------------------------------------------------------------------- the report
def fake_out_dirs(tmp_path: Path, run_json_from: Path) -> list[Path]:
    """target and retain folders: open-unlearning's EVAL files next to an evaldag run.json."""
    dirs = []
    for who in ("target", "retain"):
        d = tmp_path / who
        d.mkdir()
        shutil.copy(run_json_from / "run.json", d / "run.json")
        shutil.copy(FIXTURES / f"{who}_TOFU_EVAL.json", d / "TOFU_EVAL.json")
        shutil.copy(FIXTURES / f"{who}_TOFU_SUMMARY.json", d / "TOFU_SUMMARY.json")
        dirs.append(d)
    return dirs


def test_roc_auc_matches_the_stored_sklearn_values():
    assert plots.roc_curve([1, 2], [2, 3])[2] == pytest.approx(0.875)  # a tie counts half
    assert plots.roc_curve([], [1]) is None
    checked = 0
    for who in ("target", "retain"):
        evals = json.loads((FIXTURES / f"{who}_TOFU_EVAL.json").read_text())
        for name, e in evals.items():
            if name.startswith("mia_"):
                _, _, auc = plots.roc_curve(per_item(e["forget"], "score"), per_item(e["holdout"], "score"))
                assert auc == pytest.approx(e["auc"], abs=1e-12), (who, name)
                checked += 1
    assert checked == 12


def test_histogram_math_and_log_switch():
    assert plots.bin_counts([0.0, 0.5, 1.0, 1.0], 0.0, 1.0, 4) == [1, 0, 1, 2]
    assert plots.nice_ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    lin = plots.histogram_svg([("a", [0.1, 0.2, float("nan")])], title="t", xlabel="x")
    log = plots.histogram_svg([("a", [1e-6, 1e-2, 1.0])], title="t", xlabel="x")
    assert "n=2" in lin and "log10 x" not in lin and "log10 x" in log
    assert plots.histogram_svg([("a", [float("nan")])], title="t", xlabel="x") is None


def test_report_compares_runs_and_draws_plots(tofu_run, tmp_path):
    _, out = tofu_run
    target, retain = fake_out_dirs(tmp_path, out)
    page = build_report_html([target, retain])
    assert page.count('data-plot="truth-ratio"') == 2 and page.count('data-plot="roc"') == 2 and page.count('data-plot="prob"') == 2
    assert "differs from the stored" not in page
    table = re.search(r'<table class="ed-table ed-sortable ed-metrics" data-bench="TOFU">.*?</table>', page, re.S).group(0)
    assert ">target<" in table and ">retain<" in table
    row = re.search(r"<tr class=\"ed-headline\"><td>forget_quality</td>.*?</tr>", table).group(0)
    target_fq = json.loads((FIXTURES / "target_TOFU_SUMMARY.json").read_text())["forget_quality"]
    assert repr(target_fq) in row
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="ed-dag"') == 2
    assert "sequences forwarded" in page and "padding" in page and "slowest nodes" in page
    assert 'src="http' not in page and "<link" not in page


def test_report_without_run_json_or_plot_data(tmp_path):
    ou = tmp_path / "ou_only"
    ou.mkdir()
    shutil.copy(FIXTURES / "target_MUSE_EVAL.json", ou / "MUSE_EVAL.json")
    page = build_report_html([ou])
    assert 'data-plot="roc"' in page and 'data-plot="truth-ratio"' not in page and "no run.json" in page
    assert 'class="ed-dag"' not in page
    toy = toy_run_dir(tmp_path)
    page = build_report_html([toy])
    assert 'id="plots"' not in page and page.count('class="ed-dag"') == 1  # toy draws no plots: no empty section
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="neither run.json"):
        build_report_html([tmp_path / "empty"])


def test_render_draws_a_run_from_its_files_alone_without_the_engine(tmp_path):
    """render/ is a leaf: a copy of its modules, in a process where importing evaldag fails,
    draws a finished run from its JSON exactly as the installed package does, and its
    report page is the engine's page minus nothing but the plugin sections (none for toy)."""
    import shutil

    out = toy_run_dir(tmp_path)
    shutil.copytree(Path(render.__file__).parent, tmp_path / "site" / "leafrender",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import sys; sys.modules['evaldag'] = None; sys.path.insert(0, sys.argv[2]); import leafrender as r; "
            "sys.stdout.write(r.to_mermaid(sys.argv[1]) + r.to_svg(sys.argv[1]) + r.build_report_html([sys.argv[1]]))")
    got = subprocess.run([sys.executable, "-c", code, str(out), str(tmp_path / "site")], capture_output=True,
                         text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert got.returncode == 0, got.stderr
    assert got.stdout == render.to_mermaid(out) + render.to_svg(out) + build_report_html([out])
    with pytest.raises(TypeError, match="cannot draw int"):  # neither a View, a folder nor what a builder knows
        render.as_view(3)
