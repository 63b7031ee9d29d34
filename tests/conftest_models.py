"""Tiny models for tests, built in-process and cached for the session.

The tokenizer is a byte-level BPE trained on the fixture TOFU texts, so merges such as
``ĠDara`` exist and the prompt/answer boundary quirk can be reproduced. Models use an
initializer range of 0.3 so greedy generation is not degenerate. Import these helpers
with ``from .conftest_models import ...`` (pytest runs with ``--import-mode=importlib``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY_LLAMA = FIXTURES / "tiny-llama"
TOFU = FIXTURES / "tofu_tiny"
OPEN_UNLEARNING = FIXTURES / "open_unlearning"


def one_thread() -> None:
    """Tests measure correctness, not speed: one torch thread is fastest on a busy machine."""
    import torch

    torch.set_num_threads(1)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tofu_rows(subset: str = "forget10_perturbed") -> list[dict]:
    return read_jsonl(TOFU / f"{subset}.json")


@functools.lru_cache(maxsize=None)
def qa_texts() -> tuple[str, ...]:
    """The fixture's QA pairs in the plain template: the tiny tokenizer's training text."""
    rows = tofu_rows("full") + tofu_rows("forget10_perturbed")
    return tuple(f"Question: {r['question']}\nAnswer: {r['answer']}" for r in rows)


@functools.lru_cache(maxsize=None)
def tokenizer(vocab_size: int = 512) -> Any:
    from .tiny_models import tiny_tokenizer

    return tiny_tokenizer(qa_texts(), vocab_size=vocab_size)


@functools.lru_cache(maxsize=None)
def model(arch: str = "llama", seed: int = 0, layers: int = 2, hidden: int = 64) -> Any:
    from .tiny_models import tiny_gpt2, tiny_llama

    build = {"llama": tiny_llama, "gpt2": tiny_gpt2}[arch]
    return build(tokenizer(), layers=layers, hidden=hidden, seed=seed, initializer_range=0.3)


def resource(arch: str = "llama", **kwargs: Any) -> Any:
    """A fresh HFModel resource around the cached tiny model."""
    from evaldag.engine.adapters.hf import HFModel

    return HFModel.from_pretrained_objects(model(arch, **kwargs), tokenizer(), name=f"tiny-{arch}")


class CountingModel:
    """Wraps a model resource and counts how often the engine asks for each half."""

    kind = "model"

    def capabilities(self) -> Any:
        return self.inner.capabilities()

    def identity(self) -> Any:
        return self.inner.identity()

    def verify_unchanged(self) -> None:
        self.inner.verify_unchanged()

    def __init__(self, inner: Any):
        self.inner = inner
        self.load_calls = 0
        self.encoder_calls = 0

    def fingerprint(self) -> str:
        return self.inner.fingerprint()

    def encoder(self) -> Any:
        self.encoder_calls += 1
        return self.inner.encoder()

    def load(self) -> Any:
        self.load_calls += 1
        return self.inner.load()

    def describe(self) -> dict:
        return self.inner.describe()


def nudged_checkpoint(dest: Path, factor: float) -> Path:
    """A copy of the tiny target with one MLP weight scaled by ``factor``: another checkpoint, another
    fingerprint, other numbers (sweeps, shards and the session tests need several)."""
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file

    shutil.copytree(TINY_LLAMA / "target", dest)
    weights = load_file(str(dest / "model.safetensors"))
    name = sorted(k for k in weights if k.endswith("mlp.down_proj.weight"))[0]
    weights[name] = (weights[name] * np.float32(factor)).astype(weights[name].dtype)
    save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def register_mlp_scale(name: str) -> type:
    """Registers a model transform ``name`` that multiplies every MLP weight by ``factor`` (default 0.5,
    positional): a cheap stand-in for a quantizer in the attack tests (a name starting with ``quantize``
    is scored by Q), so they need no bitsandbytes and no training."""
    import pydantic
    import torch

    from evaldag.engine import transforms

    class Params(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
        factor: float = 0.5

    def apply(self, model, tokenizer):
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "mlp" in n:
                    p.mul_(self.params.factor)
        return model

    cls = type(f"MLPScale_{name}", (transforms.Transform,), {
        "__doc__": register_mlp_scale.__doc__, "name": name, "version": "1", "Params": Params, "positional": "factor",
        "apply": apply})
    return transforms.register(cls)
