"""A tiny unlearning run for the callback's tests: gradient ascent on the fixture forget set.

``make_trainer(out, steps, save_steps)`` returns a transformers ``Trainer`` over the tiny
Llama target (tests/fixtures/tiny-llama/target) that maximises the loss of TOFU-tiny's
forget10 rows (question + answer), on CPU, deterministic. Run as a script under several
ranks (RANK/WORLD_SIZE/MASTER_* set) it is one rank of a DDP job:
``python tests/tiny_trainer.py OUT STEPS EVERY_N CACHE`` (see test_integrations.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FIX = Path(__file__).parent / "fixtures"
TINY = FIX / "tiny-llama"
TOFU = FIX / "tofu_tiny"
OPTIONS = dict(data=str(TOFU), retain_model=str(TINY / "retain"), metrics=["forget_Q_A_Prob", "forget_quality"],
               max_new_tokens=8)


def forget_rows(tokenizer, n: int = 16) -> list[dict]:
    rows = [json.loads(line) for line in (TOFU / "forget10.json").read_text().splitlines() if line.strip()][:n]
    out = []
    for r in rows:
        ids = tokenizer(r["question"] + " " + r["answer"], truncation=True, max_length=48)["input_ids"]
        out.append({"input_ids": ids, "labels": list(ids)})
    return out


def collate(batch: list[dict]) -> dict:
    import torch

    width = max(len(b["input_ids"]) for b in batch)
    ids = torch.full((len(batch), width), 2, dtype=torch.long)  # the tiny tokenizer's pad id
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, b in enumerate(batch):
        n = len(b["input_ids"])
        ids[i, :n], labels[i, :n], mask[i, :n] = torch.tensor(b["input_ids"]), torch.tensor(b["labels"]), 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def make_trainer(out: Path, steps: int, save_steps: int | None = None, lr: float = 3e-3, **more):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    class Ascent(Trainer):
        """Gradient ascent: the forget set's loss, negated."""

        def compute_loss(self, model, inputs, return_outputs=False, **kw):
            outputs = model(**inputs)
            return (-outputs.loss, outputs) if return_outputs else -outputs.loss

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(TINY / "target"))
    model = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32)
    args = TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=2, learning_rate=lr,
                             save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
                             logging_steps=1000, report_to=[], use_cpu=True, seed=0, data_seed=0,
                             disable_tqdm=True, dataloader_num_workers=0, save_only_model=True, **more)
    return Ascent(model=model, args=args, train_dataset=forget_rows(tok), data_collator=collate, processing_class=tok)


def leave() -> None:
    """End a worker rank: close the job's group (as PyTorch asks), then exit without interpreter
    teardown. A finished gloo process can abort in teardown (exit -6, "terminate called without
    an active exception", no Python frame left): seen here once in about 40 two-rank DDP jobs
    that left the group up, and once in CI on an FSDP rank that had closed it (PyTorch's pull
    request 179291 describes the mechanism). What the test checks is printed by then."""
    import torch.distributed as dist

    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":  # one rank of a 2-process DDP run (gloo)
    import torch.distributed as dist

    from evaldag.engine.integrations import EvaldagCallback

    out, steps, every, cache = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    trainer = make_trainer(out, steps)
    options = {**OPTIONS, "metrics": ["forget_Q_A_Prob"], "retain_model": None}  # short: no retain side
    cb = EvaldagCallback.for_trainer(trainer, "tofu", every_n_steps=every, cache_dir=cache, **options)
    trainer.train()
    # the job's group outlived every evaluation: one more collective works
    t = __import__("torch").tensor([1.0])
    dist.all_reduce(t)
    print(json.dumps({"rank": dist.get_rank(), "sum": t.item(), "steps": [h["step"] for h in cb.history],
                      "summary": [h["summary"] for h in cb.history]}))
    leave()
