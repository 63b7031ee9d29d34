"""bf16 scoring against fp32: how far every TOFU metric moves, and what it buys per request kind.

Run: python tests/perf/bench_bf16.py --model FOLDER [--limit 5] [--template chat] [--data DIR]
     python tests/perf/bench_bf16.py --model FOLDER --micro   (a scoring forward and a decode step alone)

Runs ``evaldag run tofu`` twice in this process on the same data and rows, cold each time
(own cache): ``--dtype fp32`` then ``--dtype bf16`` (weights in bf16; evaldag's per-token
statistics are always log-softmaxed in float32). Prints, per metric of TOFU_SUMMARY.json,
both values and their relative difference, and the largest relative difference over the
metric's rows (TOFU_EVAL.json's value_by_index); then per request kind the CPU and wall
seconds of each dtype (bench_floor's recording of the executor) and their ratio. A run of
one row a split comes first, discarded: the first run in a process pays one-time costs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_floor import load, record_run  # noqa: E402 - after sys.path
from bench_tofu_scale import FIX, METRICS  # noqa: E402


def numbers(x, path=""):
    """Every float leaf of a nested EVAL value, by path."""
    if isinstance(x, bool) or x is None:
        return {}
    if isinstance(x, (int, float)):
        return {path: float(x)}
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in numbers(val, f"{path}/{key}").items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in numbers(val, f"{path}/{i}").items()}
    return {}


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def micro(folder: str, repeat: int = 3) -> None:
    """The scoring forward (16 rows x 64 tokens, head and statistics on every position) and
    one decode step (32 rows, a 96-token cache) alone, fp32 against bf16: best of ``repeat``
    in CPU seconds. "bf16, fp32 head" projects the bf16 hidden states with an fp32 copy of the
    head. Then how far each bf16 variant's log-probs (of random ids) are from fp32's."""
    import time

    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from evaldag.engine.adapters.hf.hf_adapter import _stats_kernel

    def best(fn) -> float:
        out = []
        for _ in range(repeat):
            c = time.process_time()
            fn()
            out.append(time.process_time() - c)
        return min(out)

    ids = torch.randint(0, 1000, (16, 64))
    times, lps = {}, {}
    for dtype in (torch.float32, torch.bfloat16):
        m = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
        head32 = m.get_output_embeddings().weight.float()
        with torch.inference_mode():
            def score(fp32_head=False):
                h = m.base_model(input_ids=ids, use_cache=False)[0].reshape(-1, m.config.hidden_size)
                logits = h.float() @ head32.T if fp32_head else m.get_output_embeddings()(h).float()
                return torch.cat([_stats_kernel(logits[k : k + 256], ids.reshape(-1)[k : k + 256])[0]
                                  for k in range(0, len(logits), 256)])

            cache = DynamicCache(config=m.config)
            m(input_ids=torch.randint(0, 1000, (32, 96)), past_key_values=cache, use_cache=True)
            step = torch.randint(0, 1000, (32, 1))

            def decode():
                c = DynamicCache(config=m.config)
                for layer, src in zip(c.layers, cache.layers):
                    layer.lazy_initialization(src.keys, src.values)
                    layer.keys, layer.values = src.keys.clone(), src.values.clone()
                m(input_ids=step, past_key_values=c, use_cache=True, logits_to_keep=1)

            name = str(dtype).replace("torch.", "")
            times[f"{name} score"] = best(score)
            times[f"{name} decode"] = best(decode)
            lps[name] = score()
            if dtype == torch.bfloat16:
                times["bfloat16, fp32 head score"] = best(lambda: score(True))
                lps["bfloat16, fp32 head"] = score(True)
    f32s, f32d = times["float32 score"], times["float32 decode"]
    for k, v in times.items():
        base = f32s if "score" in k else f32d
        print(f"  {k:<28}{v:8.3f} CPU s  ({base / v:.2f}x fp32)")
    for k in ("bfloat16", "bfloat16, fp32 head"):
        d = (lps[k] - lps["float32"]).abs()
        print(f"  log-prob of {k} - fp32: largest {float(d.max()):.3f}, mean {float(d.mean()):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default=str(FIX / "tofu_tiny"))
    ap.add_argument("--limit", default="5")
    ap.add_argument("--template", default="chat", choices=("plain", "chat"))
    ap.add_argument("--metrics", default=METRICS)
    ap.add_argument("--micro", action="store_true", help="only the scoring forward and decode step alone")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.micro:
        print(f"scoring forward and decode step alone, one thread; {load()}")
        micro(args.model)
        print(f"after: {load()}")
        return
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, limit in (("warm-up", "1"), ("fp32", args.limit), ("bf16", args.limit)):
            out = Path(tmp) / dtype
            argv = ["run", "tofu", "--quiet", "--model", args.model, "--data", args.data, "--metrics", args.metrics,
                    "--limit", limit, "--template", args.template, "--dtype", "fp32" if dtype == "warm-up" else dtype, "--out", str(out),
                    "--cache-dir", str(Path(tmp) / f"cache-{dtype}")]
            print(f"{dtype}: {load()}")
            _, spent, _, whole = record_run(argv)
            summary = json.loads((out / "TOFU_SUMMARY.json").read_text())
            evals = json.loads((out / "TOFU_EVAL.json").read_text())
            runs[dtype] = (spent, whole, summary, evals)
    (s32, w32, sum32, ev32), (s16, w16, sum16, ev16) = runs["fp32"], runs["bf16"]
    print(f"\n{'metric':<34}{'fp32':>12}{'bf16':>12}{'rel diff':>10}{'rows: max rel diff':>20}")
    for name in sorted(sum32):
        a, b = sum32[name], sum16.get(name)
        rows32, rows16 = numbers(ev32.get(name)), numbers(ev16.get(name))
        worst = max((rel(v, rows16[k]) for k, v in rows32.items() if k in rows16), default=float("nan"))
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            print(f"{name:<34}{a:>12.5g}{b:>12.5g}{rel(a, b):>10.2e}{worst:>20.2e}")
        else:
            print(f"{name:<34}{str(a)[:11]:>12}{str(b)[:11]:>12}")
    print(f"\n{'kind':<12}{'fp32 CPU s':>11}{'bf16 CPU s':>11}{'speed-up':>9}{'fp32 wall s':>12}{'bf16 wall s':>12}{'speed-up':>9}")
    for kind in s32:
        (a_w, a_c), (b_w, b_c) = s32[kind], s16.get(kind, (float("nan"), float("nan")))
        print(f"{kind:<12}{a_c:>11.2f}{b_c:>11.2f}{a_c / b_c:>9.2f}{a_w:>12.2f}{b_w:>12.2f}{a_w / b_w:>9.2f}")
    print(f"{'whole run':<12}{w32.cpu:>11.2f}{w16.cpu:>11.2f}{w32.cpu / w16.cpu:>9.2f}{w32.wall:>12.2f}{w16.wall:>12.2f}"
          f"{w32.wall / w16.wall:>9.2f}")
    print(f"after: {load()}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
