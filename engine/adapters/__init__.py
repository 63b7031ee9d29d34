"""Model adapters: the only code that turns text into ids and runs weights.

``base`` holds the protocols every backend implements; ``hf`` the transformers backend;
``testing`` tiny in-process models for tests and the demo. Importing this package does
not import torch or transformers.
"""

from .base import Encoded, Encoder, ModelAdapter, ModelResource, OutOfMemory, PromptTemplate
from .hf import HFAdapter, HFEncoder, HFModel
from . import hf_peft  # noqa: F401 - registers HFPeftModel: HFModel(ADAPTER_DIR) is an adapter over its base
from . import hf_gguf  # noqa: F401 - registers HFGGUFModel: HFModel(FILE.gguf) is dequantized by transformers

__all__ = [
    "Encoded", "Encoder", "ModelAdapter", "ModelResource", "OutOfMemory", "PromptTemplate",
    "HFAdapter", "HFEncoder", "HFModel",
]
