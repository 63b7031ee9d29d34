"""Benchmark: the executor's planning against open-unlearning's way of batching.

Run on purpose (pytest does not collect ``bench_*.py``)::

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python tests/perf/bench_executor.py

2,000 (question, answer) pairs with a realistic length spread and 30 % repeats (several
metrics asking for the same forward pass) are scored as TokenStats on two models built
in-process: tiny (2 layers, hidden 64) and small (4 layers, hidden 256). Both sides use
the same adapter and kernel; only the planning differs:

* naive: dataset order, batches of 32, no dedupe, no sort (open-unlearning's DataLoader);
* executor: dedupe, sort longest first, pack under the device's token budget;

plus a warm rerun of the executor from its request cache (a new Executor, same dir).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for tiny_models (a test helper)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tofu_tiny"


def pairs(n: int, dup_share: float, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs, ``dup_share`` of them repeats of earlier ones, in a shuffled order.

    Answers are 1-6 sentences drawn from the fixture's answers, paraphrases and perturbed
    answers (skewed short, as TOFU's are), so sequences run from ~20 to ~200 tokens.
    """
    rows = []
    for name in ("full", "forget10_perturbed", "retain_perturbed"):
        rows += [json.loads(x) for x in (FIXTURES / f"{name}.json").read_text().splitlines() if x.strip()]
    sentences = [r["answer"] for r in rows]
    sentences += [r["paraphrased_answer"] for r in rows if "paraphrased_answer" in r]
    sentences += [p for r in rows for p in r.get("perturbed_answer", [])]
    questions = [r["question"] for r in rows]
    rng = random.Random(seed)
    n_unique = round(n * (1 - dup_share))
    unique = set()
    while len(unique) < n_unique:
        k = min(6, 1 + int(rng.expovariate(0.8)))
        unique.add((rng.choice(questions), " ".join(rng.choice(sentences) for _ in range(k))))
    uniq = sorted(unique)
    rng.shuffle(uniq)
    out = uniq + [rng.choice(uniq) for _ in range(n - n_unique)]
    rng.shuffle(out)
    return out


def build(tok, layers: int, hidden: int):
    from evaldag.engine.adapters.hf import HFModel
    from tiny_models import tiny_llama

    return HFModel.from_pretrained_objects(tiny_llama(tok, layers=layers, hidden=hidden, seed=0), tok, f"llama-{layers}x{hidden}")


def naive(adapter, reqs, batch: int) -> dict:
    rows = real = padded = 0
    t0 = time.perf_counter()
    for i in range(0, len(reqs), batch):
        chunk = reqs[i : i + batch]
        adapter.run_batch(chunk)
        r, p = adapter.last_batch_tokens
        rows, real, padded = rows + len(chunk), real + r, padded + p
    return {"rows": rows, "real": real, "padded": padded, "seconds": time.perf_counter() - t0}


def planned(model, reqs, cache_dir: str) -> tuple[dict, dict]:
    from evaldag.engine.executor import Executor
    from evaldag.engine.cache import RequestStore

    ex = Executor(cache=RequestStore(cache_dir))
    t0 = time.perf_counter()
    ex.serve([(model, r) for r in reqs])
    cold_s = time.perf_counter() - t0
    s = ex.stats.summary()
    warm = Executor(cache=RequestStore(cache_dir))
    t0 = time.perf_counter()
    warm.serve([(model, r) for r in reqs])
    warm_s = time.perf_counter() - t0
    assert warm.stats.summary()["sequences_forwarded"] == 0
    cold = {"rows": s["sequences_forwarded"], "real": s["tokens_real"], "padded": s["tokens_padded"], "seconds": cold_s}
    return cold, {"seconds": warm_s}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--dup", type=float, default=0.3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="timings are the fastest of this many runs")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from evaldag.engine.adapters.base import PromptTemplate
    from tiny_models import tiny_tokenizer
    from evaldag.engine.requests import TokenStats

    torch.set_num_threads(args.threads)
    data = pairs(args.pairs, args.dup)
    tok = tiny_tokenizer([f"Question: {q}\nAnswer: {a}" for q, a in data], vocab_size=1024)
    print(f"{len(data)} pairs, {len(set(data))} unique; torch threads {args.threads}; "
          f"default cpu budget; fastest of {args.repeat} runs")
    for name, layers, hidden in (("tiny", 2, 64), ("small", 4, 256)):
        model = build(tok, layers, hidden)
        enc = model.encoder()
        reqs = []
        for q, a in data:
            e = enc.encode_qa(q, a, PromptTemplate.plain())
            reqs.append(TokenStats(e.context_ids, e.continuation_ids))
        n_unique = len(set(reqs))
        lengths = sorted(r.length() for r in reqs)
        adapter = model.load()
        adapter.run_batch(reqs[:4])  # warm-up (allocator, head probe)
        runs = []
        for _ in range(args.repeat):  # interleaved, so a busy spell on the machine hits both sides
            with tempfile.TemporaryDirectory() as d:
                runs.append((naive(adapter, reqs, args.batch), *planned(model, reqs, d)))
        base, ours, warm = (min((r[i] for r in runs), key=lambda x: x["seconds"]) for i in range(3))
        useful = sum(r.length() for r in set(reqs))
        print(f"\n{name} llama ({layers} layers, hidden {hidden}): sequence length p10/p50/p90/max = "
              f"{lengths[len(lengths) // 10]}/{lengths[len(lengths) // 2]}/{lengths[9 * len(lengths) // 10]}/{lengths[-1]}")
        print(f"  {'':34s}{'naive (order, 32)':>20s}{'executor':>14s}")
        rows = [
            ("forward rows per unique sequence", base["rows"] / n_unique, ours["rows"] / n_unique, "{:.2f}"),
            ("padding fraction", 1 - base["real"] / base["padded"], 1 - ours["real"] / ours["padded"], "{:.1%}"),
            ("seconds", base["seconds"], ours["seconds"], "{:.2f}"),
            ("useful tokens/s", useful / base["seconds"], useful / ours["seconds"], "{:,.0f}"),
        ]
        for label, a, b, fmt in rows:
            print(f"  {label:34s}{fmt.format(a):>20s}{fmt.format(b):>14s}")
        print(f"  speed ratio (naive s / executor s)  {base['seconds'] / ours['seconds']:.2f}x")
        print(f"  warm rerun / cold executor run      {warm['seconds'] / ours['seconds']:.3f} "
              f"({warm['seconds']:.2f} s from the request cache)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
