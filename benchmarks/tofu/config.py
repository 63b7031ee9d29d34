"""What a TOFU run reads: the config a Python user builds and ``evaldag run tofu`` fills in."""

from __future__ import annotations

from pydantic import Field, field_validator

from ..common import RetainOptions, menu_metrics
from ..prompt_transforms import PromptTransformOptions
from ..uncertainty import IntervalOptions
from ..unlearning.classifier import ClassifierOptions

# open-unlearning's configs/eval/tofu.yaml, in its order
DEFAULT_METRICS = (
    "forget_truth_ratio",
    "forget_quality",
    "forget_Q_A_Prob",
    "forget_Q_A_ROUGE",
    "model_utility",
    "privleak",
    "extraction_strength",
)
MIA_METRICS = ("mia_loss", "mia_zlib", "mia_min_k", "mia_min_k_plus_plus", "mia_gradnorm", "mia_reference")


class TofuConfig(RetainOptions, ClassifierOptions, IntervalOptions, PromptTransformOptions):
    """The models and the retain side (:class:`RetainOptions`), the data and the graph's settings."""

    metrics: tuple[str, ...] = DEFAULT_METRICS
    data: str | None = None  # folder with <subset>.json|jsonl|parquet (or locuslab/TOFU when online)
    forget_split: str = "forget10"
    holdout_split: str | None = None  # default: holdout<NN> matching the forget split
    max_new_tokens: int = 200  # greedy generation length for ROUGE
    k: float = 0.4  # Min-K% / Min-K%++ (privleak uses mia_min_k)
    limit: float | None = Field(None, gt=0)  # the first N rows of every split, or a fraction below 1 (--limit)
    menu = "tofu"  # the words of metrics (ClassifierOptions: `all` brings the gibberish metric only with a classifier)

    @field_validator("metrics", mode="before")
    @classmethod
    def _menu(cls, value):
        """The words ``--metrics`` takes (``all``, ``default``, ``mia``), as the CLI takes them."""
        return menu_metrics("tofu", value)