"""Model adapters: the only code that turns text into ids and runs weights.

``base`` holds the protocols every backend implements; ``hf`` the transformers backend;
``testing`` tiny in-process models for tests and the demo. Importing this package does
not import torch or transformers.
"""

from .base import Encoded, Encoder, ModelAdapter, ModelResource, OutOfMemory, PromptTemplate
from .hf import HFAdapter, HFEncoder, HFModel

__all__ = [
    "Encoded", "Encoder", "ModelAdapter", "ModelResource", "OutOfMemory", "PromptTemplate",
    "HFAdapter", "HFEncoder", "HFModel",
]
