"""A warm report as informative as the cold one, one vertex per fingerprint in every picture,
and a sweep's --out folder that every command reads."""

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from evaldag.engine import cli
from evaldag.engine.render.view import from_run_dir

FIX = Path(__file__).parents[1] / "fixtures"
TINY = FIX / "tiny-llama"
BASE = ["run", "tofu", "--data", str(FIX / "tofu_tiny"), "--metrics", "forget_Q_A_Prob,forget_truth_ratio"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One sweep of two checkpoints, run cold then warm on one cache; its stdout kept."""
    root = tmp_path_factory.mktemp("sweep")
    out, cache = root / "out", root / "cache"
    argv = [*BASE, "--model", str(TINY / "target"), "--model", str(TINY / "retain"), "--out", str(out),
            "--cache-dir", str(cache)]
    return root, out, argv


def _run(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr()


def test_a_sweep_labels_each_block_ends_with_a_table_and_its_out_folder_reads_back(sweep, capsys):
    root, out, argv = sweep
    code, got = _run(argv, capsys)
    assert code == 0, got.err
    blocks = [line for line in got.out.splitlines() if line.startswith("== ")]
    assert blocks == [f"== TOFU · target ({TINY / 'target'})", f"== TOFU · retain ({TINY / 'retain'})"]
    head = next(line for line in got.out.splitlines() if line.startswith("TOFU "))
    assert head.split() == ["TOFU", "target", "retain"]
    record = json.loads((out / "sweep.json").read_text())
    assert [c["name"] for c in record["checkpoints"]] == ["target", "retain"]
    for name in ("target", "retain"):  # the table behind it is each checkpoint's SUMMARY
        summary = json.loads((out / name / "TOFU_SUMMARY.json").read_text())
        assert record["table"]["TOFU"]["forget_Q_A_Prob"][name] == summary["forget_Q_A_Prob"]
        row = [line for line in got.out.splitlines() if line.strip().startswith("forget_Q_A_Prob")][-1]  # the table's
        assert f"{summary['forget_Q_A_Prob']:.4g}" in row.split()

    # `evaldag report OUT` and `evaldag graph --run OUT` on the sweep's own folder
    (out / "report.html").unlink()  # the link: report rewrites the page inside OUT's set
    code, got = _run(["report", str(out)], capsys)
    assert code == 0, got.err
    page = (out / "report.html").read_text()
    assert page.index(">target<") < page.index(">retain<")  # a column per checkpoint, in sweep order
    code, got = _run(["graph", "--run", str(out), "--format", "json"], capsys)
    assert code == 0, got.err
    view = json.loads(got.out)
    fps = Counter(n["fingerprint"] for n in view["nodes"] if n["fingerprint"])
    assert fps and max(fps.values()) == 1  # the work both checkpoints share is drawn once
    names = [nm for n in view["nodes"] for nm in n["names"]]
    assert "target: TOFU/forget_Q_A_Prob" in names and "retain: TOFU/forget_Q_A_Prob" in names

    code, got = _run(["report", str(root)], capsys)  # a folder holding no run says so in one line
    assert code == 2 and "not a run folder" in got.err and str(root) in got.err


def test_a_warm_report_keeps_when_and_how_each_node_was_computed(sweep, capsys):
    root, out, argv = sweep
    cold = {name: json.loads((out / name / "run.json").read_text())["nodes"] for name in ("target", "retain")}
    code, got = _run(argv, capsys)  # warm: everything cached
    assert code == 0, got.err
    warm = json.loads((out / "target" / "run.json").read_text())["nodes"]
    assert {n["status"] for n in warm.values()} == {"cached"}
    for name, n in warm.items():
        was = cold["target"][name]
        if was["status"] == "computed":  # computed by the cold run: its time and reason kept
            assert n["computed"]["seconds"] == pytest.approx(was["seconds"], abs=1e-6)
            assert n["computed"]["reason"] == was["reason"] == "new"
            assert datetime.fromisoformat(n["computed"]["at"]).tzinfo is not None
    scorer = next(k for k, n in cold["target"].items() if k.startswith("qa_stats") and n["status"] == "computed")
    assert warm[scorer]["computed"]["backend"] == {"model": f"hf:{TINY / 'target'}"}

    view = from_run_dir(out / "target")
    box = next(n for n in view.nodes if n.key == scorer)
    assert box.status == "cached" and box.computed["seconds"] == pytest.approx(cold["target"][scorer]["seconds"], abs=1e-6)
    assert "cached: computed " in box.outcome() and "(new) by hf:" in box.outcome()
    code, got = _run(["report", str(out / "target"), "--out", str(root / "warm.html")], capsys)
    assert code == 0, got.err
    page = (root / "warm.html").read_text()
    assert "none: every answer cached" in page and "not loaded: every answer cached" in page
    secs = cold["target"][scorer]["seconds"]
    assert f'data-sort="{secs!r}"' in page or f'data-sort="{round(secs, 6)!r}"' in page  # the cold run's time, shown


def _entry(fp, status="computed", parents=None, names=None, seconds=0.5):
    return {"fingerprint": fp, "status": status, "seconds": seconds, "reason": "new" if status == "computed" else "",
            "metric": "qa_stats", "kind": "scorer", "parents": parents or {}, **({"names": names} if names else {})}


def test_one_vertex_per_fingerprint_when_two_vertices_are_one_piece_of_work(tmp_path, capsys):
    """The retain and the reference model bound to one checkpoint: two graph vertices, one
    fingerprint, computed once (the other cached). The run view draws one box with both names."""
    run = {"nodes": {
        "qa_stats[aaa111]": _entry("f" * 64),
        "qa_stats[bbb222]": _entry("f" * 64, status="cached", seconds=0.0),
        "TOFU/forget_quality": {**_entry("1" * 64, parents={"retain": "qa_stats[aaa111]"}), "kind": "aggregator",
                                "metric": "forget_quality"},
        "TOFU/mia_reference": {**_entry("2" * 64, parents={"reference": "qa_stats[bbb222]"}), "kind": "aggregator",
                               "metric": "mia_reference"},
    }}
    (tmp_path / "run.json").write_text(json.dumps(run))
    view = from_run_dir(tmp_path)
    stats = [n for n in view.nodes if n.metric == "qa_stats"]
    assert len(stats) == 1 and sorted(stats[0].names) == ["qa_stats[aaa111]", "qa_stats[bbb222]"]
    assert stats[0].status == "computed" and stats[0].seconds == 0.5  # the record that did the work
    kids = {view.node(e.dst).metric for e in view.edges if e.src == stats[0].id}
    assert kids == {"forget_quality", "mia_reference"}

    # the plan of the documented command: --retain-model only (the reference defaults to it)
    code = cli.main(["graph", "tofu", "--model", str(TINY / "target"), "--retain-model", str(TINY / "retain"),
                     "--data", str(FIX / "tofu_tiny"), "--metrics", "all", "--format", "json",
                     "--cache-dir", str(tmp_path / "c")])
    got = capsys.readouterr()
    assert code == 0, got.err
    plan = json.loads(got.out)
    fps = Counter(n["fingerprint"] for n in plan["nodes"] if n["fingerprint"])
    assert max(fps.values()) == 1
    assert any(len(n["names"]) == 2 and n["metric"] == "qa_stats" for n in plan["nodes"])
