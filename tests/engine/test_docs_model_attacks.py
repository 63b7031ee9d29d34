"""docs/model-attacks.md's plugin example: the module and its entry point, installed as a third
party would, add a model attack that ``--attack`` runs, with the numbers of a plain run of a
folder holding the weights it makes."""

import json
import re
import sys
from pathlib import Path

from ..inprocess import run_cli
from ..plugins import install

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "model-attacks.md"
FIX = ROOT / "tests" / "fixtures"
TARGET = FIX / "tiny-llama" / "target"


def _section(text: str, heading: str) -> str:
    return re.search(rf"## {re.escape(heading)}\n(.*?)(?=\n## |\Z)", text, re.S).group(1)


def _tofu(tmp, out, *extra, model=TARGET):
    return run_cli(["run", "tofu", "--model", model, "--data", FIX / "tofu_tiny", "--limit", "4",
                    "--metrics", "forget_Q_A_Prob,forget_truth_ratio", "--quiet", "--out", tmp / out,
                    "--cache-dir", tmp / "cache", *extra])


def test_the_plugin_example_adds_a_model_attack(tmp_path, monkeypatch):
    section = _section(DOC.read_text(), "Writing a transform (a plugin)")
    module = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    eps = toml.replace('[project.entry-points."evaldag.transforms"]', "[evaldag.transforms]").replace('"', "")
    site = tmp_path / "site"
    install(site, "myattack", {"myattack.py": module}, eps)
    monkeypatch.syspath_prepend(str(site))  # entry points and the module found as pip would leave them

    proc = _tofu(tmp_path, "out", "--attack", "noise:0.02")
    assert proc.returncode == 0, proc.stderr
    import myattack  # the example's own module, as installed
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(TARGET)
    myattack.Noise(myattack.NoiseParams(std=0.02)).apply(model, None)
    model.save_pretrained(tmp_path / "noisy")
    for f in TARGET.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            (tmp_path / "noisy" / f.name).write_bytes(f.read_bytes())
    assert _tofu(tmp_path, "ref", model=tmp_path / "noisy").returncode == 0
    got = json.loads((tmp_path / "out" / "attacks" / "noise_0.02" / "TOFU_EVAL.json").read_text())
    assert got == json.loads((tmp_path / "ref" / "TOFU_EVAL.json").read_text())
    assert got != json.loads((tmp_path / "out" / "TOFU_EVAL.json").read_text())
    sys.modules.pop("myattack", None)
