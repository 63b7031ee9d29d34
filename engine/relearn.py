"""The relearning model attack's training: a named, pinned recipe, its overrides, and one Trainer run.

A relearn fine-tunes a model on question/answer rows (a split of the benchmark's data) and
the result is evaluated like any checkpoint; the forgotten knowledge it brings back is the
attack's measure. The default recipe is the OpenUnlearning meta-evaluation's as its public
re-implementation runs it (:data:`RECIPES` ``"openunlearning-meta-eval"``): 1 epoch, lr 2e-5,
per-device batch 4 x gradient accumulation 4, no warmup, weight decay 0, AdamW, a constant
rate, max length 512, the loss on answer tokens only, the prompt built with the benchmark's own
template. Every field can be overridden by name (``relearn:epochs=2,lr=1e-5``) and the whole
recipe is recorded with the step count it gives.

Rows are trained in dataset order unless ``shuffle`` names a seed (the rows are then permuted
once by that seed, and still read in order). ``disjoint=true`` is Deeb & Roger's split: train on
one half of the rows, score the other half (:func:`disjoint_halves`), which separates recovered
knowledge from retraining on the test items.

Training goes through transformers' ``Trainer`` (under ``torchrun`` it trains as any Trainer job
does). The loss of one optimizer step is the mean over every answer token of its accumulated
micro-batches (transformers' ``num_items_in_batch``), not the mean of the micro-batches' means.
GPU training is not bit-reproducible, so a stored relearn (``cache/weights.py``) is one training
run, keyed by its recipe, never retrained to check it.

torch, transformers and peft are imported inside the functions that train: parsing a recipe or
counting its steps imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np
import pydantic

__all__ = ["RECIPES", "Recipe", "RecipeError", "RecipeParams", "TrainReport", "collate", "disjoint_halves", "encode_rows",
           "parse_recipe", "step_count", "train", "training_order"]

DEFAULT_RECIPE = "openunlearning-meta-eval"


class RecipeError(ValueError):
    """A recipe name or field that does not exist, or a value of the wrong kind: one line."""


@dataclass(frozen=True)
class Recipe:
    """Every setting a relearn depends on; all of it is in the derived model's fingerprint."""

    recipe: str = DEFAULT_RECIPE  # the named default these fields started from
    split: str = "forget"  # which of the benchmark's splits trains (or a file)
    epochs: float = 1.0
    lr: float = 2e-5
    batch: int = 4  # per device
    grad_accum: int = 4
    warmup: int = 0  # warmup steps
    weight_decay: float = 0.0
    scheduler: str = "constant"
    optimizer: str = "adamw_torch"
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0  # transformers' Trainer default
    max_length: int = 512
    shuffle: int | None = None  # a seed permutes the rows once; None: dataset order
    disjoint: bool = False  # train on one half of the split, score the other half
    mode: str = "full"  # "full" or "lora" (a LoRA relearn stores only its adapter)
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: str = "all-linear"
    seed: int = 0  # the Trainer's seed (LoRA's initial A matrices, dropout)

    def fields(self) -> dict[str, Any]:
        """The recipe as recorded: every field, in declaration order."""
        return dataclasses.asdict(self)

    def steps(self, rows: int, world_size: int = 1) -> int:
        return step_count(rows, self, world_size)


#: the named, pinned recipes; ``recipe=NAME`` starts from one, other fields override it
RECIPES: dict[str, Recipe] = {DEFAULT_RECIPE: Recipe()}

class RecipeParams(pydantic.BaseModel):
    """The recipe's fields as ``--attack relearn:KEY=VALUE,...`` and :func:`parse_recipe` take them,
    each checked (the transform's ``Params``)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    recipe: str = DEFAULT_RECIPE
    split: str = "forget"
    epochs: float = pydantic.Field(1.0, gt=0)
    lr: float = pydantic.Field(2e-5, gt=0)
    batch: int = pydantic.Field(4, gt=0)
    grad_accum: int = pydantic.Field(4, gt=0)
    warmup: int = pydantic.Field(0, ge=0)
    weight_decay: float = pydantic.Field(0.0, ge=0)
    scheduler: Literal["constant", "linear", "cosine"] = "constant"
    optimizer: Literal["adamw_torch"] = "adamw_torch"
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    max_grad_norm: float = pydantic.Field(1.0, ge=0)
    max_length: int = pydantic.Field(512, gt=0)
    shuffle: int | None = None
    disjoint: bool = False
    mode: Literal["full", "lora"] = "full"
    lora_r: int = pydantic.Field(8, gt=0)
    lora_alpha: int = pydantic.Field(16, gt=0)
    lora_dropout: float = pydantic.Field(0.0, ge=0, lt=1)
    lora_targets: str = "all-linear"
    seed: int = 0

    @pydantic.field_validator("recipe")
    @classmethod
    def _named(cls, v: str) -> str:
        if v not in RECIPES:
            close = difflib.get_close_matches(v, RECIPES, n=1)
            raise ValueError(f"no recipe named {v!r}" + (f"; did you mean {close[0]}?" if close else "")
                             + f" (known: {', '.join(RECIPES)})")
        return v

    @pydantic.field_validator("shuffle", mode="before")
    @classmethod
    def _none(cls, v: Any) -> Any:
        return None if isinstance(v, str) and v.strip().lower() in ("", "none", "no", "false") else v

    def as_recipe(self) -> Recipe:
        """The named recipe with the fields given here over it."""
        return dataclasses.replace(RECIPES[self.recipe], **self.model_dump(exclude_unset=True), recipe=self.recipe)


def parse_recipe(params: dict[str, str] | None = None) -> Recipe:
    """A :class:`Recipe` from ``key=value`` strings: ``recipe=NAME`` picks the start (default
    :data:`DEFAULT_RECIPE`), the other keys override its fields. An unknown key or recipe, or a value
    that does not fit, is one line (with the close matches)."""
    params = dict(params or {})
    known = [k for k in RecipeParams.model_fields if k != "recipe"]
    for key in params:
        if key not in RecipeParams.model_fields:
            close = difflib.get_close_matches(key, known, n=3)
            raise RecipeError(f"relearn: no parameter {key!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
                              + f" (known: {', '.join(known)})")
    try:
        return RecipeParams(**params).as_recipe()
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise RecipeError(f"relearn: {where}={params.get(where)!r}: {str(err['msg']).removeprefix('Value error, ')}") from None


def step_count(rows: int, recipe: Recipe, world_size: int = 1) -> int:
    """Optimizer steps of a relearn on ``rows`` rows (the rows it trains on: half of the split
    when disjoint). As the Trainer counts them: micro-batches per epoch over the ranks, an
    optimizer step per ``grad_accum`` of them, a last partial accumulation counting as a step."""
    batches = math.ceil(rows / (recipe.batch * max(world_size, 1)))
    per_epoch = max(math.ceil(batches / recipe.grad_accum), 1) if rows else 0
    return math.ceil(per_epoch * recipe.epochs)


def training_order(n: int, recipe: Recipe) -> list[int]:
    """The positions of the rows in the order they train: dataset order, or one permutation by ``shuffle``."""
    order = list(range(n))
    if recipe.shuffle is not None:
        order = [int(i) for i in np.random.default_rng(recipe.shuffle).permutation(n)]
    return order


def disjoint_halves(n: int, recipe: Recipe) -> tuple[list[int], list[int]]:
    """Deeb & Roger's split of ``n`` rows: (the positions that train, the positions that are scored).
    The first half of :func:`training_order` trains (``n // 2`` rows), the rest is scored, kept in
    dataset order."""
    order = training_order(n, recipe)
    half = n // 2
    return order[:half], sorted(order[half:])


def encode_rows(encoder: Any, rows: Sequence[dict], template: Any, recipe: Recipe,
                joint: bool = False) -> list[dict[str, list[int]]]:
    """Each row's training example: the prompt built by the benchmark's template exactly as its
    metrics build it (``HFEncoder.encode_qa``), the labels -100 on the prompt, so only answer
    tokens are learned."""
    out = []
    for row in rows:
        enc = encoder.encode_qa(row["question"], row["answer"], template, joint=joint, max_length=recipe.max_length)
        ids = list(enc.context_ids) + list(enc.continuation_ids)
        out.append({"input_ids": ids, "labels": [-100] * len(enc.context_ids) + list(enc.continuation_ids)})
    return out


def collate(features: Sequence[dict], pad_id: int, mask: str = "reference") -> dict[str, Any]:
    """Right-padded tensors of a micro-batch. ``mask="reference"`` is open-unlearning's collator
    (``attention_mask = input_ids != pad``, which also hides a real eos when pad = eos);
    ``"padding"`` masks only the padding."""
    import torch

    width = max(len(f["input_ids"]) for f in features)
    ids = torch.full((len(features), width), pad_id, dtype=torch.long)
    labels = torch.full((len(features), width), -100, dtype=torch.long)
    attn = torch.zeros((len(features), width), dtype=torch.long)
    for i, f in enumerate(features):
        n = len(f["input_ids"])
        ids[i, :n] = torch.tensor(f["input_ids"])
        labels[i, :n] = torch.tensor(f["labels"])
        attn[i, :n] = 1
    if mask == "reference":
        attn = ids.ne(pad_id).long()
    return {"input_ids": ids, "labels": labels, "attention_mask": attn}


@dataclass
class TrainReport:
    """What one relearn did: its steps, rows, losses and cost."""

    steps: int
    rows: int
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    trainable: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


TRAINER_RUNS: list[int] = []  # one entry per Trainer built: a warm rerun's tests count it


def lora_model(model: Any, recipe: Recipe) -> Any:
    """``model`` wrapped with a fresh LoRA adapter of the recipe's rank (initialised under its seed)."""
    import torch
    from peft import LoraConfig, get_peft_model

    targets: Any = recipe.lora_targets if recipe.lora_targets == "all-linear" else recipe.lora_targets.split("+")
    torch.manual_seed(recipe.seed)
    cfg = LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, lora_dropout=recipe.lora_dropout,
                     target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def train(model: Any, tokenizer: Any, examples: Sequence[dict], recipe: Recipe, workdir: str,
          mask: str = "reference") -> TrainReport:
    """Fine-tune ``model`` in place on ``examples`` (from :func:`encode_rows`, in training order)
    through transformers' Trainer with the recipe's settings; ``workdir`` takes the Trainer's
    scratch files (nothing is saved there). For LoRA, pass the model :func:`lora_model` wrapped."""
    import torch
    from transformers import Trainer, TrainingArguments

    start, cpu = time.perf_counter(), time.process_time()
    device = next(model.parameters()).device
    args = TrainingArguments(
        output_dir=workdir, num_train_epochs=recipe.epochs, learning_rate=recipe.lr,
        per_device_train_batch_size=recipe.batch, gradient_accumulation_steps=recipe.grad_accum,
        warmup_steps=recipe.warmup, weight_decay=recipe.weight_decay, lr_scheduler_type=recipe.scheduler,
        optim=recipe.optimizer, adam_beta1=recipe.adam_beta1, adam_beta2=recipe.adam_beta2,
        adam_epsilon=recipe.adam_eps, max_grad_norm=recipe.max_grad_norm, seed=recipe.seed,
        train_sampling_strategy="sequential", save_strategy="no", report_to=[], logging_steps=1,
        disable_tqdm=True, use_cpu=device.type == "cpu", dataloader_num_workers=0,
        remove_unused_columns=False, bf16=False, fp16=False)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    trainer = Trainer(model=model, args=args, train_dataset=list(examples),
                      data_collator=lambda feats: collate(feats, pad, mask))
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for quiet in (PrinterCallback, ProgressCallback):  # the run's stdout is the summary's
        trainer.remove_callback(quiet)
    TRAINER_RUNS.append(1)
    with torch.enable_grad():
        trainer.train()
    model.eval()
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return TrainReport(steps=int(trainer.state.global_step), rows=len(examples), losses=losses,
                       seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu, trainable=trainable)
