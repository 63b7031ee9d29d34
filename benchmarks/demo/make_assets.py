"""Build the assets behind ``evaldag demo``: data, tokenizer, three tiny checkpoints.

Run ``python -m evaldag.benchmarks.demo.make_assets`` to rewrite the package's
``benchmarks/demo/assets/`` folder, or ``--out DIR`` to write elsewhere. Offline, CPU,
one thread, fixed seeds; a few minutes at most on a 2-core laptop. Steps:

1. ``data/``: fictitious authors in TOFU's format (:mod:`.authors`).
2. A byte-level BPE tokenizer (vocab 1024; bos ``<|begin_of_text|>``, eos
   ``<|endoftext|>``, pad ``<pad>``) trained in-process with ``tokenizers``.
3. ``models/target`` (fine-tuned on every author, forget included), ``models/retain``
   (never sees the two forget authors) and ``models/unlearned`` (``target`` after a few
   gradient-ascent steps on ``forget10``): ``LlamaForCausalLM``, 2 layers, hidden 64,
   4 heads, MLP 128, tied embeddings, fp32 safetensors. Each holds the tokenizer too.
4. A check that the models show the signal the demo is about (forget probability,
   forget quality, ROUGE), printed as a table and written to ``manifest.json`` together
   with the sha256 of every file.

Training uses open-unlearning's plain template exactly as it tokenizes for evaluation:
``tokenizer("Question: {q}\\nAnswer: " + answer)`` (bos added by the tokenizer), eos
appended, loss on the tokens after ``len(tokenizer(prompt))`` only.

The tokenizer splits text into words that *carry their trailing space* ("Answer: " is
one piece) before byte-level BPE. So the prompt's tokens are always a prefix of the
prompt+answer tokens: no answer token is lost at the boundary (open-unlearning issue
#195 does not arise) and greedy generation starts from a token sequence the model saw
in training.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from . import authors

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "assets"

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


def _batch(tokenizer, items: Sequence[tuple[list[int], list[int]]]):
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
            ids, _, labels = _batch(tokenizer, [data[i] for i in order[start:start + batch_size]])
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
    ids, _, labels = _batch(tokenizer, [encode(tokenizer, r["question"], r["answer"]) for r in forget_rows])
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


# ---------------------------------------------------------------- the signal check

def avg_losses(model, tokenizer, questions: Sequence[str], answers: Sequence[str], batch_size: int = 32) -> list[float]:
    """open-unlearning's ``avg_loss`` (mean NLL of the scored tokens, eos included)."""
    import torch

    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(questions), batch_size):
            items = [encode(tokenizer, q, a) for q, a in
                     zip(questions[start:start + batch_size], answers[start:start + batch_size])]
            nll, count = _token_losses(model, *_batch(tokenizer, items))
            out += (nll / count).tolist()
    return out


def greedy(model, tokenizer, questions: Sequence[str], max_new_tokens: int = 200) -> list[str]:
    """Greedy answers, one prompt at a time (no padding), cut at eos, stripped."""
    import torch

    out = []
    with torch.no_grad():
        for q in questions:
            ids = tokenizer(prompt_of(q), return_tensors="pt")["input_ids"]
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=tokenizer.eos_token_id)
            text = tokenizer.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
            out.append(text.split(EOS)[0].strip())
    return out


def rouge_l_recall(truths: Sequence[str], generations: Sequence[str]) -> list[float]:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return [scorer.score(t, g)["rougeL"].recall for t, g in zip(truths, generations)]


def model_signal(model, tokenizer, data: authors.DemoData) -> dict[str, Any]:
    """Per-item probabilities and truth ratios on ``forget10_perturbed`` / ``retain_perturbed``
    and greedy ROUGE-L recall, computed with plain transformers as open-unlearning does."""
    out: dict[str, Any] = {}
    for name, subset in (("forget", "forget10_perturbed"), ("retain", "retain_perturbed")):
        rows = data.subsets[subset]
        qs = [r["question"] for r in rows]
        loss = avg_losses(model, tokenizer, qs, [r["answer"] for r in rows])
        para = avg_losses(model, tokenizer, qs, [r["paraphrased_answer"] for r in rows])
        k = len(rows[0]["perturbed_answer"])
        pert = [avg_losses(model, tokenizer, qs, [r["perturbed_answer"][j] for r in rows]) for j in range(k)]
        prob = [math.exp(-x) for x in loss]
        tr = [math.exp(-sum(pert[j][i] for j in range(k)) / k) / (math.exp(-para[i]) + 1e-10)
              for i in range(len(rows))]
        gens = greedy(model, tokenizer, qs)
        out[name] = {
            "prob": prob,
            "truth_ratio": tr,
            "rougeL_recall": rouge_l_recall([r["answer"] for r in rows], gens),
            "generations": gens,
        }
    return out


def summarize(signals: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Aggregate numbers: forget/retain Q_A_Prob, forget truth ratio (closer_to_1_better),
    forget quality (KS p-value against the retain model) and ROUGE-L recall."""
    from scipy.stats import ks_2samp

    def mean(xs):
        return float(sum(xs) / len(xs))

    ref = signals["retain"]["forget"]["truth_ratio"]
    table = {}
    for name, s in signals.items():
        tr = s["forget"]["truth_ratio"]
        table[name] = {
            "forget_Q_A_Prob": mean(s["forget"]["prob"]),
            "forget_truth_ratio": mean([min(t, 1 / (t + 1e-10)) for t in tr]),
            "forget_quality": float(ks_2samp(tr, ref).pvalue),
            "forget_Q_A_ROUGE": mean(s["forget"]["rougeL_recall"]),
            "retain_Q_A_Prob": mean(s["retain"]["prob"]),
            "retain_Q_A_ROUGE": mean(s["retain"]["rougeL_recall"]),
        }
    return table


COLUMNS = ("forget_Q_A_Prob", "forget_quality", "forget_truth_ratio", "forget_Q_A_ROUGE",
           "retain_Q_A_Prob", "retain_Q_A_ROUGE")


def format_table(table: dict[str, dict[str, float]]) -> str:
    lines = ["model      " + "  ".join(f"{c:>18s}" for c in COLUMNS)]
    for name in DISPLAY_ORDER:
        lines.append(f"{name:<10s} " + "  ".join(f"{table[name][c]:18.4g}" for c in COLUMNS))
    return "\n".join(lines)


def check_orderings(table: dict[str, dict[str, float]]) -> list[str]:
    """What the demo must show; returns the failures (empty when all hold)."""
    t, r, u = (table[m] for m in MODELS)
    fails = []
    if not t["forget_Q_A_Prob"] > u["forget_Q_A_Prob"] > r["forget_Q_A_Prob"]:
        fails.append("forget_Q_A_Prob must order target > unlearned > retain")
    if not r["forget_quality"] > u["forget_quality"] > t["forget_quality"]:
        fails.append("forget_quality must order retain > unlearned > target")
    if not t["forget_Q_A_ROUGE"] > r["forget_Q_A_ROUGE"]:
        fails.append("forget_Q_A_ROUGE must be higher for target than retain")
    if not t["retain_Q_A_ROUGE"] > 0.6:
        fails.append("target's retain_Q_A_ROUGE must be well above 0.3")
    return fails


# ---------------------------------------------------------------- manifest

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_hashes(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): sha256(p) for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def environment() -> dict[str, str]:
    """What byte-for-byte reproduction of the checkpoints depends on (see docs/demo-assets.md)."""
    import platform

    import tokenizers
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "machine": platform.machine(),
        "cpu": _cpu_name(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


# ---------------------------------------------------------------- main

def build_data(out: Path, seed: int = authors.SEED) -> authors.DemoData:
    return authors.write(out / "data", seed)


def build_all(out: Path, log=print) -> dict[str, Any]:
    """Write every asset into ``out``; return the manifest (also written to ``manifest.json``).
    ``log=None`` keeps it quiet."""
    log = log or (lambda *_: None)
    with deterministic_torch():
        return _build_all(out, log)


def _build_all(out: Path, log) -> dict[str, Any]:
    # Start from a clean slate so that manifest.json lists exactly what this run wrote.
    for stale in [out / "data", out / "tokenizer", *(out / "models" / name for name in MODELS)]:
        if stale.is_dir():
            shutil.rmtree(stale)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    data = build_data(out)
    timings["data"] = time.perf_counter() - t0

    t = time.perf_counter()
    tok_files = tokenizer_files(train_tokenizer(tokenizer_texts(data)))
    tok_dir = out / "tokenizer"
    tok_dir.mkdir(parents=True, exist_ok=True)
    for name, body in tok_files.items():
        (tok_dir / name).write_bytes(body)
    tokenizer = load_tokenizer(tok_dir)
    timings["tokenizer"] = time.perf_counter() - t

    models: dict[str, Any] = {}
    for name, include_forget in (("target", True), ("retain", False)):
        log(f"training {name} ...")
        t = time.perf_counter()
        models[name] = train(tokenizer, authors.training_pairs(data, include_forget), **TRAIN, log=log)
        timings[name] = time.perf_counter() - t
    log("unlearning (gradient ascent on forget10) ...")
    t = time.perf_counter()
    models["unlearned"] = unlearn(models["target"], tokenizer, data.subsets["forget10"], **UNLEARN, log=log)
    timings["unlearned"] = time.perf_counter() - t
    for name in MODELS:
        save_model(models[name], tok_files, out / "models" / name)

    t = time.perf_counter()
    signals = {name: model_signal(load_model(out / "models" / name), tokenizer, data) for name in MODELS}
    table = summarize(signals)
    timings["check"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    log(format_table(table))
    fails = check_orderings(table)
    for f in fails:
        log(f"SIGNAL CHECK FAILED: {f}")

    manifest = {
        "generated_by": "python -m evaldag.benchmarks.demo.make_assets",
        "seeds": {"data": authors.SEED, "train": TRAIN["seed"]},
        "train": TRAIN,
        "unlearn": UNLEARN,
        "model": MODEL,
        "environment": environment(),
        "signal": table,
        "signal_ok": not fails,
        "files": file_hashes(out),
    }
    (out / "manifest.json").write_bytes(_dump_json(manifest))
    log("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    manifest["timings"] = timings
    manifest["signals"] = signals
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="folder to write (default: the package's assets folder); its data/, "
                             "tokenizer/ and models/{target,retain,unlearned}/ are replaced")
    parser.add_argument("--data-only", action="store_true", help="write data/ only (seconds)")
    args = parser.parse_args(argv)
    if args.data_only:
        build_data(args.out)
        return 0
    manifest = build_all(args.out)
    return 0 if manifest["signal_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
