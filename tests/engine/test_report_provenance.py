"""run.json names each checkpoint and data split, and report.html shows the paths beside the fingerprints."""

import json
from pathlib import Path

from evaldag.engine.cli import main

FIX = Path(__file__).parents[1] / "fixtures"


def test_run_json_and_report_name_the_checkpoints(tmp_path):
    target, retain = FIX / "tiny-llama" / "target", FIX / "tiny-llama" / "retain"
    out = tmp_path / "out"
    argv = ["run", "tofu", "--quiet", "--model", str(target), "--data", str(FIX / "tofu_tiny"), "--retain-model", str(retain),
            "--metrics", "forget_quality", "--template", "plain", "--out", str(out), "--cache-dir", str(tmp_path / "c")]
    assert main(argv) == 0
    prov = json.loads((out / "run.json").read_text())["provenance"]
    res = prov["resources"]
    assert res["model"]["path"] == str(target.resolve()) and res["retain_model"]["path"] == str(retain.resolve())
    assert res["model"]["loaded_dtype"] == "float32" and res["model"]["kind"] == "model"
    assert res["tofu_forget"]["source"].endswith("tofu_tiny:forget10_perturbed") and res["tofu_forget"]["rows"] == 40
    assert prov["command"] == ["evaldag", *argv]
    html = (out / "report.html").read_text()
    for name in ("model", "retain_model"):
        assert str(Path(res[name]["path"])) in html
        assert res[name]["fingerprint"][:12] in html
    # the column's subtitle: the model's last part and its fingerprint; the full path on hover
    assert f"{Path(res['model']['path']).name} · {res['model']['fingerprint'][:12]}" in html
    assert f"\nmodel: {res['model']['path']}\"" in html
