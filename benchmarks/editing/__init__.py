"""The editing benchmark (``evaldag run editing``) and its shipped material.

``TRACER`` is the shipped trace model (a tiny Qwen2 whose causal trace shows ROME's
early site), with its facts, edits, texts and covariance corpus beside the weights;
``tests/asset_builders/editing/make_tracer.py`` in the repository rebuilds it.
"""

from pathlib import Path

TRACER = Path(__file__).resolve().parent / "assets" / "tracer"
