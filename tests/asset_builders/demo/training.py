"""Training the demo's tokenizer and checkpoints (used by ``make_assets``).

Deterministic set-up, the tokenizer, open-unlearning-style encoding (the plain template,
loss on the answer tokens only) and the fine-tuning / gradient-ascent loops.
"""


from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import random
from pathlib import Path
from typing import Any, Sequence

from evaldag.benchmarks.demo import ASSETS

from . import authors

DEFAULT_OUT = ASSETS  # the package's copy, which `evaldag demo` reads

BOS, EOS, PAD = "<|begin_of_text|>", "<|endoftext|>", "<pad>"
VOCAB_SIZE = 1024
# Words keep their trailing space; runs of other whitespace are their own pieces.
SPLIT_PATTERN = r"\p{L}+ ?|\p{N}+ ?|[^\s\p{L}\p{N}]+ ?|\s+"
QUESTION_START, QUESTION_END, ANSWER_START = "Question: ", "\n", "Answer: "

MODELS = ("target", "retain", "unlearned")
DISPLAY_ORDER = ("target", "unlearned", "retain")


def prompt_of(question: str) -> str:
    """open-unlearning's plain template (``phi-1_5`` / Llama-2 configs), no few-shot."""
    return f"{QUESTION_START}{question}{QUESTION_END}{ANSWER_START}"


# Hyper-parameters. Changing any of them changes the checkpoints.
TRAIN = dict(seed=1234, epochs=30, batch_size=32, lr=4e-3, warmup_steps=20, weight_decay=0.0)
UNLEARN = dict(steps=10, lr=5e-4)
MODEL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=4, max_position_embeddings=512, rms_norm_eps=1e-6,
             rope_theta=10000.0, initializer_range=0.02, tie_word_embeddings=True)


# ---------------------------------------------------------------- set-up

def setup_determinism() -> None:
    """Process-wide settings for a standalone run: offline hub, one thread, deterministic ops."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


@contextlib.contextmanager
def deterministic_torch():
    """:func:`setup_determinism` for the duration of a block; torch's thread count,
    deterministic flag and global RNG state are restored afterwards (tests share a process)."""
    import torch

    threads, flag = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        setup_determinism()
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(flag)


def _seed_all(seed: int) -> None:
    import torch

    torch.manual_seed(seed)


# ---------------------------------------------------------------- tokenizer

def tokenizer_texts(data: authors.DemoData) -> list[str]:
    """Every text a model will see: prompts and answers of every subset, in file order."""
    texts = []
    for subset in authors.SUBSETS:
        for row in data.subsets[subset]:
            texts.append(prompt_of(row["question"]) + row["answer"])
            for key in ("paraphrased_answer", "paraphrased_question"):
                if key in row:
                    texts.append(row[key])
            texts.extend(row.get("perturbed_answer", []))
            texts.extend(row[f"option{i}"] for i in range(1, 5) if f"option{i}" in row)
    return texts


def train_tokenizer(texts: Sequence[str], vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE (``tokenizers.Tokenizer``) with bos prepended by its post-processor."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    return tok


def _dump_json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def tokenizer_files(tok) -> dict[str, bytes]:
    """The three files of a ``PreTrainedTokenizerFast``, written by hand so that they are
    byte-stable and load with transformers 4.4x as well as 5.x."""
    added = {}
    for content in (BOS, EOS, PAD):
        added[str(tok.token_to_id(content))] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True,
        }
    config = {
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MODEL["max_position_embeddings"],
        "padding_side": "right",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    body = json.dumps(json.loads(tok.to_str()), indent=2, ensure_ascii=True) + "\n"
    return {
        "tokenizer.json": body.encode("ascii"),
        "tokenizer_config.json": _dump_json(config),
        "special_tokens_map.json": _dump_json(special),
    }


def load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


# ---------------------------------------------------------------- encoding

def encode(tokenizer, question: str, answer: str) -> tuple[list[int], list[int]]:
    """input_ids and labels exactly as open-unlearning's ``preprocess_chat_instance``
    (``apply_chat_template: false``): prompt and full text tokenized separately, eos
    appended when missing, labels -100 on the first ``len(prompt_ids)`` tokens."""
    prompt = prompt_of(question)
    full = tokenizer(prompt + answer, add_special_tokens=True)["input_ids"]
    n_prompt = len(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if full[-1] != tokenizer.eos_token_id:
        full = full + [tokenizer.eos_token_id]
    return full, [-100] * n_prompt + full[n_prompt:]


def batch(tokenizer, items: Sequence[tuple[list[int], list[int]]]):
    import torch

    width = max(len(ids) for ids, _ in items)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(items), width), pad, dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for i, (x, y) in enumerate(items):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return ids, mask, labels


def _train_loss(model, ids, labels):
    """Mean NLL over the scored tokens of a right-padded batch. The lm head runs on the
    scored positions only, and no attention mask is passed: with right padding and causal
    attention no real token can see a pad, and pads are never scored."""
    import torch

    hidden = model.model(input_ids=ids).last_hidden_state[:, :-1]
    target = labels[:, 1:]
    keep = target != -100
    return torch.nn.functional.cross_entropy(model.lm_head(hidden[keep]), target[keep])


def _token_losses(model, ids, mask, labels):
    """Per-sequence sum of NLL over scored tokens and their count (shifted, as HF)."""
    import torch

    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    target = labels[:, 1:]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100, reduction="none"
    ).view(target.shape)
    return nll.sum(1), (target != -100).sum(1)


# ---------------------------------------------------------------- training

def new_model(tokenizer, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    _seed_all(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **MODEL,
    )
    return LlamaForCausalLM(config)


def train(tokenizer, pairs: Sequence[dict], seed: int, epochs: int, batch_size: int, lr: float,
          warmup_steps: int, weight_decay: float, log=print):
    """Fine-tune a fresh model on ``pairs`` (answer tokens only); AdamW, warmup + cosine."""
    import torch

    model = new_model(tokenizer, seed)
    model.train()
    data = [encode(tokenizer, p["question"], p["answer"]) for p in pairs]
    rng = random.Random(seed)
    steps_per_epoch = math.ceil(len(data) / batch_size)
    total = epochs * steps_per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:
        if step < warmup_steps:
            return lr * (step + 1) / warmup_steps
        frac = (step - warmup_steps) / max(1, total - warmup_steps)
        return lr * 0.5 * (1 + math.cos(math.pi * frac))

    step = 0
    for epoch in range(epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        epoch_loss = 0.0
        for start in range(0, len(order), batch_size):
            ids, _, labels = batch(tokenizer, [data[i] for i in order[start:start + batch_size]])
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss = _train_loss(model, ids, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            epoch_loss += float(loss.detach())
            step += 1
        if log and (epoch % 10 == 9 or epoch == epochs - 1):
            log(f"  epoch {epoch + 1:3d}/{epochs}  loss {epoch_loss / steps_per_epoch:.4f}")
    model.eval()
    return model


def unlearn(model, tokenizer, forget_rows: Sequence[dict], steps: int, lr: float, log=print):
    """Gradient ascent: ``steps`` full-batch AdamW steps that *raise* the forget answers'
    NLL (open-unlearning's ``GradAscent``, without its trainer). Uses no randomness."""
    import torch

    model = copy.deepcopy(model)
    model.train()
    ids, _, labels = batch(tokenizer, [encode(tokenizer, r["question"], r["answer"]) for r in forget_rows])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    for step in range(steps):
        loss = _train_loss(model, ids, labels)
        opt.zero_grad(set_to_none=True)
        (-loss).backward()
        opt.step()
        if log:
            log(f"  step {step + 1}/{steps}  forget loss {float(loss.detach()):.4f}")
    model.eval()
    return model


def save_model(model, tok_files: dict[str, bytes], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    for name, body in tok_files.items():
        (folder / name).write_bytes(body)


def load_model(folder: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder))
    model.eval()
    return model


