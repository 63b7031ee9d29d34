"""The relearning attack's training: the recipe, its step count, and equality with a plain loop.

A relearn through transformers' Trainer must be the documented recipe and nothing else: the same
weights as a hand-written loop (torch AdamW, the same batches in the same order, the loss over
every answer token of an accumulated step, the gradient clipped at 1.0) within 1e-5."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evaldag.engine.relearn import (RECIPES, RecipeError, RecipeParams, collate, disjoint_halves, encode_rows, parse_recipe, step_count,
                                    train, training_order)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
MODEL = FIX / "tiny-llama" / "target"


def _rows(n: int = 40) -> list[dict]:
    lines = (FIX / "tofu_tiny" / "forget10.json").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()][:n]


def test_default_recipe_is_the_meta_evaluation_one():
    r = parse_recipe({})
    assert (r.recipe, r.split, r.epochs, r.lr, r.batch, r.grad_accum, r.warmup, r.weight_decay, r.scheduler,
            r.optimizer, r.max_length, r.shuffle, r.mode) == (
        "openunlearning-meta-eval", "forget", 1.0, 2e-5, 4, 4, 0, 0.0, "constant", "adamw_torch", 512, None, "full")
    assert RecipeParams().as_recipe() == r == RECIPES["openunlearning-meta-eval"]
    # 40 rows: 10 micro-batches of 4, an optimizer step per 4 of them, the last partial one counted: 3 steps
    assert step_count(40, r) == 3
    assert step_count(20, r) == 2  # the disjoint half
    assert step_count(40, parse_recipe({"epochs": "2"})) == 6
    assert step_count(40, r, world_size=2) == 2


def test_overrides_and_refusals():
    r = parse_recipe({"lr": "1e-4", "epochs": "2", "shuffle": "7", "mode": "lora", "disjoint": "true"})
    assert (r.lr, r.epochs, r.shuffle, r.mode, r.disjoint) == (1e-4, 2.0, 7, "lora", True)
    with pytest.raises(RecipeError, match=r"no parameter 'lrr'; did you mean lr"):
        parse_recipe({"lrr": "1"})
    with pytest.raises(RecipeError, match=r"no recipe named 'openunlearning'; did you mean openunlearning-meta-eval"):
        parse_recipe({"recipe": "openunlearning"})
    with pytest.raises(RecipeError, match=r"epochs='x': Input should be a valid number"):
        parse_recipe({"epochs": "x"})
    with pytest.raises(RecipeError, match=r"lr='0': Input should be greater than 0"):
        parse_recipe({"lr": "0"})
    with pytest.raises(RecipeError, match=r"mode='qlora': Input should be 'full' or 'lora'"):
        parse_recipe({"mode": "qlora"})


def test_order_and_disjoint_halves():
    r = parse_recipe({})
    assert training_order(6, r) == [0, 1, 2, 3, 4, 5]
    assert disjoint_halves(6, r) == ([0, 1, 2], [3, 4, 5])
    s = parse_recipe({"shuffle": "3"})
    order = training_order(40, s)
    assert sorted(order) == list(range(40)) and order != list(range(40))
    train_half, scored = disjoint_halves(40, s)
    assert train_half == order[:20] and scored == sorted(order[20:]) and not set(train_half) & set(scored)


def _reference(model, examples, recipe, pad):
    """The recipe written out: AdamW, constant rate, no warmup, batches in order, the loss of a step
    = the sum of the answer tokens' cross-entropy over its micro-batches / their token count."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(recipe.adam_beta1, recipe.adam_beta2),
                            eps=recipe.adam_eps, weight_decay=recipe.weight_decay)
    micro = [examples[i:i + recipe.batch] for i in range(0, len(examples), recipe.batch)]
    steps = [micro[i:i + recipe.grad_accum] for i in range(0, len(micro), recipe.grad_accum)]
    model.train()
    for group in steps:
        batches = [collate(m, pad) for m in group]
        tokens = sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)
        for b in batches:
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     b["labels"][:, 1:].reshape(-1), ignore_index=-100,
                                                     reduction="sum") / tokens
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.max_grad_norm)
        opt.step()
        opt.zero_grad()
    return len(steps)


@pytest.mark.parametrize("params", [{}, {"lr": "1e-3", "grad_accum": "2", "shuffle": "5"}])
def test_relearn_equals_a_plain_loop_of_the_recipe(params, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf_encoder import HFEncoder

    recipe = parse_recipe(params)
    tok = AutoTokenizer.from_pretrained(MODEL)
    rows = _rows()
    rows = [rows[i] for i in training_order(len(rows), recipe)]
    examples = encode_rows(HFEncoder(tok), rows, PromptTemplate.plain(), recipe)
    assert all(e["labels"][0] == -100 and e["labels"][-1] == tok.eos_token_id for e in examples)

    before = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).state_dict()
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    report = train(model, tok, examples, recipe, str(tmp_path / "work"))
    ref = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    ref_steps = _reference(ref, examples, recipe, tok.pad_token_id)

    assert report.steps == ref_steps == step_count(40, recipe) == (3 if not params else 5)
    got, want = model.state_dict(), ref.state_dict()
    diff = max(float((got[k] - want[k]).abs().max()) for k in want)
    moved = max(float((want[k] - before[k]).abs().max()) for k in want)
    assert diff < 1e-5, diff
    assert moved > 2.5 * recipe.lr and diff < moved / 5, (moved, diff)  # it trained: the tolerance is below the change
    assert len(report.losses) == report.steps and all(math.isfinite(x) for x in report.losses)
