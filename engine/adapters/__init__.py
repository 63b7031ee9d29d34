"""Model adapters: the only code that turns text into ids and runs weights.

``base`` holds the protocols every backend implements (re-exported from ``backend.py``);
``hf`` and its ``hf_*`` modules the transformers backend; ``openai_*`` a served model over
HTTP; ``vllm_*`` an in-process vLLM engine; ``toy`` a numpy model for tests and the demo;
``spec`` turns a model spec (``hf:DIR``, ``openai:URL``, ``replay:FILE``) into a resource.
Importing this package does not import torch or transformers.
"""

from .base import Encoded, Encoder, ModelAdapter, ModelResource, OutOfMemory, PromptTemplate
from .hf import HFAdapter, HFEncoder, HFModel
from . import hf_peft  # noqa: F401 - registers HFPeftModel: HFModel(ADAPTER_DIR) is an adapter over its base
from . import hf_gguf  # noqa: F401 - registers HFGGUFModel: HFModel(FILE.gguf) is dequantized by transformers
from . import hf_derived  # noqa: F401 - registers HFModel.derive's maker: a model a transform derives

__all__ = [
    "Encoded", "Encoder", "ModelAdapter", "ModelResource", "OutOfMemory", "PromptTemplate",
    "HFAdapter", "HFEncoder", "HFModel",
]
