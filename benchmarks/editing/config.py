"""The editing benchmark's typed config: everything ``evaldag run editing`` reads."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: every node the benchmark can put in EDITING_EVAL.json
ALL_METRICS = (
    "weight_delta_norm", "perplexity", "perplexity_base", "perplexity_change",
    "efficacy", "efficacy_base", "generalization", "generalization_base", "specificity", "specificity_base",
    "efficacy_dataset", "causal_trace", "causal_trace_mlp", "causal_trace_attn",
    "rome_denominator", "rome_key_ood", "nf4_changed_fraction",
)
#: ROME's conditioning diagnostics read --corpus: `all` brings them only when one is given
CORPUS_METRICS = ("rome_denominator", "rome_key_ood")
#: the MLP and attention traces cost ``window``-wide restores over every cell: asked for by name
#: bitsandbytes' 4-bit round trip of both checkpoints (evaldag[quantize]): asked for by name
QUANTIZE_METRICS = ("nf4_changed_fraction",)
DEFAULT_METRICS = tuple(m for m in ALL_METRICS
                        if m not in ("causal_trace_mlp", "causal_trace_attn", *CORPUS_METRICS, *QUANTIZE_METRICS))
#: words --metrics takes for several entries (distinct from every entry's own name)
GROUPS = {
    "traces": ("causal_trace", "causal_trace_mlp", "causal_trace_attn"),
    "edit_success": ("efficacy", "efficacy_base", "generalization", "generalization_base", "specificity",
                 "specificity_base", "efficacy_dataset"),
    "perplexities": ("perplexity", "perplexity_base", "perplexity_change"),
    "rome_diagnostics": CORPUS_METRICS,
}


class EditingConfig(BaseModel):
    """An edited model beside its original.

    ``max_length`` defaults to the base model's context (at most 1,024 tokens) and
    ``stride`` to half of it (HF's GPT-2 example: 1,024 and 512). ``layers`` limits the
    weight-delta norms to those layers (default: every manipulated layer). The trace
    corrupts ``trace_occurrence`` of the subject ("last": the shipped prompts name it in
    the question and again in the answer; ROME takes the first).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None        # the edited checkpoint
    base_model: str | None = None   # the original checkpoint
    edits: str | None = None        # edit file; None: the shipped set
    texts: str | None = None        # text file for perplexity; None: the shipped set
    metrics: tuple[str, ...] = DEFAULT_METRICS
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    device: str = "auto"
    layers: tuple[int, ...] | None = None
    norm: Literal["fro", "spectral"] = "fro"
    max_length: int | None = Field(None, ge=2)
    stride: int | None = Field(None, gt=0)
    ppl_per_text: bool = False      # mean of per-text perplexities (lm-debugger) instead of HF's joined texts
    trace_samples: int = Field(10, gt=0)
    trace_noise: float | None = None
    trace_noise_factor: float = 3.0
    trace_seed: int = 1
    trace_window: int = Field(10, gt=0)
    trace_edits: tuple[int, ...] | None = None
    trace_occurrence: Literal["first", "last"] = "last"
    trace_answer: Literal["argmax", "target_true"] = "argmax"
    # --model's qualifiers (tokenizer, served_model, api_key_env, fallback, model_args: the
    # --model-arg pairs; docs/servers.md); --base-model shares --model's tokenizer (an edit
    # changes weights, never the tokenizer)
    backend_options: dict[str, str | dict[str, str]] = {}
    corpus: str | None = None       # texts for ROME's key covariance (rome_denominator, rome_key_ood)
    cov_ridge: float = Field(0.0, ge=0)  # 0: lm-debugger's exact inverse; make_edit --method rome uses 0.01
    rome_layers: tuple[int, ...] | None = None  # None: the manipulated layers
    context_templates: Literal["rome", "none"] = "rome"

    @model_validator(mode="after")
    def _corpus(self) -> "EditingConfig":
        wanted = [m for m in self.metrics if m in CORPUS_METRICS]
        if wanted and not self.corpus:
            raise ValueError(f"{wanted[0]} needs --corpus FILE: texts for ROME's key covariance that no metric scores "
                             "(the trace model ships assets/tracer/corpus.json)")
        return self
