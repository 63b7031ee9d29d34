"""The check that the demo checkpoints show the signal the demo is about, and the manifest.

Computed with plain transformers, one sequence at a time (independent of the engine):
forget probability, truth ratio, forget quality, ROUGE; plus file hashes and the build
environment recorded in ``manifest.json``.
"""


from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Sequence

from . import authors

from .training import DISPLAY_ORDER, EOS, MODELS, _token_losses, batch, encode, prompt_of  # noqa: F401


# ---------------------------------------------------------------- the signal check

def avg_losses(model, tokenizer, questions: Sequence[str], answers: Sequence[str], batch_size: int = 32) -> list[float]:
    """open-unlearning's ``avg_loss`` (mean NLL of the scored tokens, eos included)."""
    import torch

    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(questions), batch_size):
            items = [encode(tokenizer, q, a) for q, a in
                     zip(questions[start:start + batch_size], answers[start:start + batch_size])]
            nll, count = _token_losses(model, *batch(tokenizer, items))
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


