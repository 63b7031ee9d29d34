"""``evaldag cache explain NAME`` says which model and data the entry was computed from."""

import json
import os
import subprocess
import sys
from pathlib import Path

FIX = Path(__file__).parents[1] / "fixtures"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def test_explain_names_the_model_and_the_data(tmp_path):
    model, data = FIX / "tiny-llama" / "target", FIX / "tofu_tiny"
    cache = tmp_path / "c"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run([EVALDAG, "run", "tofu", "--model", str(model), "--data", str(data), "--metrics", "forget_truth_ratio",
                    "--limit", "2", "--quiet", "--out", str(tmp_path / "o"), "--cache-dir", str(cache)], env=env, check=True)
    got = subprocess.run([EVALDAG, "cache", "explain", "forget_truth_ratio", "--cache-dir", str(cache)],
                         capture_output=True, text=True, env=env, check=True)
    reads = json.loads(got.stdout)["reads"]  # an aggregator: what its scorers read
    assert reads["model"]["path"] == str(model) and reads["model"]["kind"] == "model"
    assert reads["tofu_forget"] == {"kind": "data", "source": f"{data}:forget10_perturbed", "limit": 2, "rows": 2}
