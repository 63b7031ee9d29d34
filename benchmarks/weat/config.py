"""What a WEAT run reads: the config a Python user builds and ``evaldag run weat`` fills in."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ...metrics.fairness.lookup import LookupOptions
from ...metrics.fairness.registry import MetricSettings
from ...metrics.fairness.word_sets import HFSource, Source
from ..common import ModelOptions


class WeatConfig(ModelOptions):
    """Where vectors come from, which queries and metrics, how words are looked up.

    Vectors come from ``embeddings`` (a word-vector file) or else from the input
    embeddings of ``model`` (:class:`ModelOptions`). ``queries`` is a word-set JSON file
    (default: the standard WEAT tests); ``metrics`` None runs, per query, every metric
    whose template takes it.
    """

    queries: str | None = None
    metrics: tuple[str, ...] | None = None
    embeddings: str | None = None
    embeddings_format: Literal["npz", "text", "binary"] | None = None
    leading_space: bool = False  # with a model: tokenize " word" (the mid-sentence form)
    lookup: LookupOptions = Field(default_factory=LookupOptions)
    settings: MetricSettings = Field(default_factory=MetricSettings)

    @model_validator(mode="after")
    def _one_source(self) -> "WeatConfig":
        if self.embeddings and self.model:
            raise ValueError("give embeddings (a word-vector file) or model (its input embeddings), not both")
        return self

    @property
    def source(self) -> Source:
        """``"embeddings"`` (the bound word vectors) or the model's input embeddings."""
        if self.embeddings or not self.model:
            return "embeddings"
        return HFSource(leading_space=self.leading_space)
