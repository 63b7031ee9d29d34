"""What a MUSE run reads: the config a Python user builds and ``evaldag run muse`` fills in."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..common import RetainOptions, menu_metrics
from ..prompt_transforms import PromptTransformOptions
from ..uncertainty import IntervalOptions
from ..unlearning.classifier import ClassifierOptions

DEFAULT_METRICS = ("forget_knowmem_ROUGE", "retain_knowmem_ROUGE", "forget_verbmem_ROUGE", "privleak", "extraction_strength")
MIA_METRICS = ("mia_loss", "mia_zlib", "mia_min_k", "mia_min_k_plus_plus", "mia_gradnorm", "mia_reference")


class MuseConfig(RetainOptions, ClassifierOptions, IntervalOptions, PromptTransformOptions):
    """The models and the retain side (:class:`RetainOptions`), the data and the graph's settings.

    ``forget_icl`` / ``retain_icl`` are the knowmem few-shot (question, answer) rows; left
    empty, ``build`` reads them from the data (``plan`` draws the graph without them).
    """

    metrics: tuple[str, ...] = DEFAULT_METRICS
    data: str | None = None  # a folder in MUSE's layout; default: the hub id of ``split``
    split: Literal["News", "Books"] = "News"
    forget_icl: tuple[tuple[str, str], ...] = ()
    retain_icl: tuple[tuple[str, str], ...] = ()
    knowmem_new_tokens: int = 32
    verbmem_new_tokens: int = 128
    k: float = 0.4
    limit: float | None = Field(None, gt=0)  # the first N rows of every split, or a fraction below 1 (--limit)
    menu = "muse"  # the words of metrics (ClassifierOptions: `all` brings the gibberish metric only with a classifier)

    @field_validator("metrics", mode="before")
    @classmethod
    def _menu(cls, value):
        """The words ``--metrics`` takes (``all``, ``default``, ``mia``), as the CLI takes them."""
        return menu_metrics("muse", value)

    @property
    def source(self) -> str:
        """The data folder, or MUSE's hub id for ``split``."""
        return self.data or f"muse-bench/MUSE-{self.split}"
