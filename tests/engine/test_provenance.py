"""run.json names what a run read: command line, model paths, data, retain logs, template, versions."""

import json
import sys
from pathlib import Path

from evaldag.engine import Rows, Value, cli, run
from evaldag.engine.adapters.hf import HFModel
from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine.outputs import run_json
from evaldag.engine.results import describe_resource

from ..golden_runs import FIX, TINY


def test_cli_run_json_names_model_paths_data_template_and_command(tmp_path, monkeypatch):
    argv = ["run", "tofu", "--model", str(TINY / "target"), "--data", str(FIX / "tofu_tiny"), "--metrics", "forget_Q_A_Prob",
            "--quiet", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]
    monkeypatch.setattr(sys, "argv", ["evaldag", *argv])
    assert cli.main(argv) == 0
    prov = json.loads((tmp_path / "o" / "run.json").read_text())["provenance"]
    assert prov["command"] == ["evaldag", *argv]
    assert prov["evaldag"] and prov["python"]
    model = prov["resources"]["model"]
    assert model["path"] == str((TINY / "target").resolve()) and model["source"] == "dir"
    assert model["fingerprint"] == prov["model_fingerprint"] and model["kind"] == "model"
    assert model["loaded_dtype"] == "float32" and model["loaded_device"] == "cpu"
    forget = [r for name, r in prov["resources"].items() if r["kind"] == "data" and "forget" in r.get("source", "")]
    assert forget and all(r["source"].startswith(str(FIX / "tofu_tiny")) for r in forget)
    assert prov["templates"] and "user_start_tag" in json.dumps(prov["templates"])


def test_describe_never_loads_what_a_run_did_not_use(tmp_path):
    loads = []
    rows = Rows(lambda: loads.append(1) or [{"a": 1}], "somewhere:split")
    assert describe_resource(Value([1, 2], kind="data", source="/logs.json"))["source"] == "/logs.json"
    assert rows.describe() == {"source": "somewhere:split"} and not loads
    toy = describe_resource(ToyModel(seed=3))
    assert toy["type"] == "toy-bigram" and toy["seed"] == 3 and toy["fingerprint"] == ToyModel(seed=3).fingerprint()
    hf = HFModel(TINY / "retain", dtype="fp32", device="cpu").describe()
    assert hf["path"] == str((TINY / "retain").resolve()) and "loaded_dtype" not in hf  # never loaded


def test_python_runs_record_the_resources_they_read(tmp_path):
    from evaldag.engine import metric

    @metric("prov_total", version="1", needs=["data"])
    def total(data):
        return float(sum(r["x"] for r in data))

    res = run([total(name="t")], {"data": Rows(lambda: [{"x": 1}, {"x": 2}], "mem:xs"), "unused": [5]}, cache_dir=tmp_path)
    prov = run_json(res)["provenance"]
    assert set(prov["resources"]) == {"data"}
    assert prov["resources"]["data"] == {"kind": "data", "fingerprint": res.graph.find("t").components["resources"]["data"],
                                         "source": "mem:xs", "rows": 2}
    assert Path(prov["cwd"]).is_dir()
