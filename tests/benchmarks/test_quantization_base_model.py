"""--base-model, one flag for TOFU and editing: nf4_changed_fraction beside the editing benchmark's delta norms."""

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from evaldag.engine.registry import BENCHMARKS

from ..inprocess import run_cli

pytest.importorskip("bitsandbytes")

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "benchmarks" / "demo" / "assets" / "models" / "target"
TOFU = ROOT / "tests" / "fixtures" / "tofu_tiny"


@pytest.fixture(scope="module")
def unlearned(tmp_path_factory):
    """The demo checkpoint with every linear weight of layer 0 moved far past its blocks' absmax."""
    out = tmp_path_factory.mktemp("q") / "unlearned"
    shutil.copytree(BASE, out)
    sd = load_file(str(out / "model.safetensors"))
    for n in [n for n, t in sd.items() if n.startswith("model.layers.0.") and t.dim() == 2]:
        sd[n] = sd[n] + 2 * sd[n].abs().max() + 1.0
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def test_tofu_with_base_model_writes_the_predictor(unlearned, tmp_path, cache_dir):
    out = tmp_path / "out"
    r = run_cli(["run", "tofu", "--model", unlearned, "--base-model", BASE, "--data", TOFU, "--metrics", "forget_Q_A_Prob",
                 "--limit", "2", "--out", out, "--cache-dir", cache_dir, "--quiet"])
    assert r.returncode == 0, r.stderr
    got = json.loads((out / "TOFU_EVAL.json").read_text())
    assert set(got) == {"forget_Q_A_Prob", "nf4_changed_fraction"}
    assert got["nf4_changed_fraction"]["value_by_index"] == {"0": 1.0, "1": 0.0}
    # without --base-model nothing changes: TOFU_EVAL holds what --metrics names
    out2 = tmp_path / "out2"
    assert run_cli(["run", "tofu", "--model", unlearned, "--data", TOFU, "--metrics", "forget_Q_A_Prob", "--limit", "2",
                    "--out", out2, "--cache-dir", cache_dir, "--quiet"]).returncode == 0
    assert set(json.loads((out2 / "TOFU_EVAL.json").read_text())) == {"forget_Q_A_Prob"}


def test_editing_names_it_and_a_server_base_is_one_line(unlearned, tmp_path, cache_dir):
    out = tmp_path / "out"
    r = run_cli(["run", "editing", "--model", unlearned, "--base-model", BASE, "--metrics", "nf4_changed_fraction",
                 "--out", out, "--cache-dir", cache_dir, "--quiet"])
    assert r.returncode == 0, r.stderr
    got = json.loads((out / "EDITING_EVAL.json").read_text())["nf4_changed_fraction"]
    assert got["value_by_index"] == {"0": 1.0, "1": 0.0}
    r = run_cli(["run", "tofu", "--model", unlearned, "--base-model", "openai:http://127.0.0.1:9/v1", "--data", TOFU,
                 "--metrics", "forget_Q_A_Prob", "--out", tmp_path / "o3", "--cache-dir", cache_dir])
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("evaldag: error:")]
    assert len(errors) == 1 and "--base-model openai:http://127.0.0.1:9/v1" in errors[0] and "Traceback" not in r.stderr


@pytest.mark.parametrize("order", [("editing", "tofu"), ("tofu", "editing")])
def test_one_base_model_flag_fills_both(order):
    from evaldag.engine.cli.main import parser
    from evaldag.engine.options import read

    parsed = parser(list(order), command="run").parse_args(["run", *order, "--model", "m", "--base-model", "b"])
    run = read(parsed, [BENCHMARKS.get(b) for b in order])
    assert [c.base_model for c in run.configs] == ["b", "b"]


def test_tofu_and_editing_share_one_base_model_and_one_node(unlearned, tmp_path, cache_dir):
    """`run tofu editing --base-model B`: one resource, so both EVAL files hold the same vertex, computed once."""
    out = tmp_path / "both"
    r = run_cli(["run", "tofu", "editing", "--model", unlearned, "--base-model", BASE, "--data", TOFU,
                 "--metrics", "forget_Q_A_Prob,nf4_changed_fraction", "--limit", "2", "--out", out, "--cache-dir", cache_dir, "--quiet"])
    assert r.returncode == 0, r.stderr
    tofu, editing = (json.loads((out / f"{g}_EVAL.json").read_text()) for g in ("TOFU", "EDITING"))
    assert tofu["nf4_changed_fraction"] == editing["nf4_changed_fraction"]
    assert tofu["nf4_changed_fraction"]["value_by_index"] == {"0": 1.0, "1": 0.0}
    nodes = json.loads((out / "run.json").read_text())["nodes"]
    q = [n for n in nodes.values() if n.get("metric") == "nf4_changed_fraction"]
    assert len(q) == 1 and sorted(q[0]["names"]) == ["EDITING/nf4_changed_fraction", "TOFU/nf4_changed_fraction"]
