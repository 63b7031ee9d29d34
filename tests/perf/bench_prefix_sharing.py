"""Shared prompt prefixes for truth-ratio scoring: is the question's KV, computed once and
reused for its 7 answers, faster than scoring 7 full sequences, and are the log-probs equal?

Run: python tests/perf/bench_prefix_sharing.py [--groups 400] [--repeat 2] [--model PATH --template chat]

Workload: TOFU forget10-size truth-ratio rows (bench_tofu_scale.write_data): each
question with its answer, paraphrased answer and five perturbed answers, tokenized as
open-unlearning does (prompt and answer apart). Two models: the trained tiny fixture
(2 x 64) and the random 4 x 256 Llama of bench_tofu_scale; ``--model`` adds a folder of
your own (SmolLM2-135M-Instruct: bench_floor's docstring), ``--template chat`` its chat
template.

* plain: HFAdapter.run_batch on TokenStats, packed longest first under the CPU budget
  (what the executor does today; right padding).
* shared: per batch of questions, one left-padded forward of the questions into a KV
  cache, the cache rows repeated for each answer, then one forward of the answers
  (right padded) on top of it, with position ids continuing each question's.

Prints CPU and wall seconds (median of --repeat), tokens forwarded, the largest log-prob
difference between the two, and what that does to the metrics computed from them: the
largest relative change of a row's probability (exp of the mean log-prob, as
``*_Q_A_Prob``) and of a question's truth ratio, against the golden outputs' tolerance
(2e-5 relative, tests/fidelity/test_golden_outputs.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tofu_scale import FIX, SMALL, random_llama, write_data  # noqa: E402 - after sys.path

from evaldag.engine.adapters.hf_adapter import STATS_CHUNK_ROWS, _stats_kernel  # noqa: E402
from evaldag.engine.adapters.hf_generation import forward_params  # noqa: E402

QUESTIONS_PER_BATCH = 8  # x 7 answers = 56 rows per answer forward


def shared_prefix_logprobs(adapter, groups):
    """groups: [(context_ids, [continuation_ids, ...])] -> per group, per answer, float32 log-probs."""
    import numpy as np
    import torch
    from transformers import DynamicCache

    model, pad, masked = adapter.model, adapter.pad_id, adapter.masked_id
    ctx = [c for c, _ in groups]
    wc = max(map(len, ctx))
    ids = torch.full((len(ctx), wc), pad, dtype=torch.long)
    real = torch.zeros((len(ctx), wc), dtype=torch.long)
    for g, c in enumerate(ctx):
        ids[g, wc - len(c):] = torch.tensor(c)
        real[g, wc - len(c):] = 1
    pos = (real.cumsum(-1) - 1).clamp(min=0)
    mask = real * (ids != masked).long() if masked is not None else real
    cache = DynamicCache(config=model.config)
    arg = "cache" if "cache" in forward_params(model) else "past_key_values"  # renamed in transformers 5.24
    with torch.inference_mode():
        first = model(input_ids=ids, attention_mask=mask, position_ids=pos, **{arg: cache},
                      use_cache=True, logits_to_keep=1).logits[:, -1].float()
        rows = [(g, a) for g, (_, answers) in enumerate(groups) for a in answers]
        idx = torch.tensor([g for g, _ in rows])
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys.index_select(0, idx), layer.values.index_select(0, idx)
        wa = max(len(a) for _, a in rows) - 1  # the last answer token predicts nothing we need
        out = []
        if wa > 0:
            aid = torch.full((len(rows), wa), pad, dtype=torch.long)
            areal = torch.zeros((len(rows), wa), dtype=torch.long)
            for r, (_, a) in enumerate(rows):
                aid[r, : len(a) - 1] = torch.tensor(a[:-1])
                areal[r, : len(a) - 1] = 1
            amask = areal * (aid != masked).long() if masked is not None else areal
            apos = torch.tensor([len(ctx[g]) for g, _ in rows])[:, None] + torch.arange(wa)[None]
            logits = model(input_ids=aid, attention_mask=torch.cat([mask[idx], amask], 1), position_ids=apos,
                           **{arg: cache}, use_cache=True).logits.float()
        # the same per-token statistics as TokenStats (log p, argmax, mu, var), not log p alone
        scored = torch.cat([torch.cat([first[g][None], logits[r, : len(a) - 1]]) if wa > 0 else first[g][None]
                            for r, (g, a) in enumerate(rows)])
        target = torch.tensor([t for _, a in rows for t in a])
        lp = torch.cat([_stats_kernel(scored[c : c + STATS_CHUNK_ROWS], target[c : c + STATS_CHUNK_ROWS])[0]
                        for c in range(0, len(target), STATS_CHUNK_ROWS)]).numpy()
        at = 0
        for _, a in rows:
            out.append(lp[at : at + len(a)].astype(np.float32))
            at += len(a)
    return out, len(ctx) * wc + len(rows) * wa


def metric_drift(reqs, got, shared, groups) -> str:
    """The largest relative change, plain -> shared, of a row's probability and of a question's
    truth ratio (mean of its perturbed answers' per-token probabilities over the paraphrased one's)."""
    import numpy as np

    p_plain = [float(np.exp(got[r].logprob.astype(np.float64).mean())) for r in reqs]
    p_shared = [float(np.exp(s.astype(np.float64).mean())) for s in shared]
    prob = max(abs(a - b) / max(a, b) for a, b in zip(p_plain, p_shared))
    tr, at = 0.0, 0
    for _, answers in groups:
        n = len(answers)
        if n == 7:  # answer, paraphrase, five perturbed: a question whose contexts all agree
            ratio = [float(np.mean(p[at + 2 : at + 7]) / p[at + 1]) for p in (p_plain, p_shared)]
            tr = max(tr, abs(ratio[0] - ratio[1]) / max(ratio))
        at += n
    return f"largest relative change: probability {prob:.1e}, truth ratio {tr:.1e} (golden tolerance 2e-5)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--model", action="append", default=[], help="another model folder (repeatable)")
    ap.add_argument("--template", default="plain", choices=("plain", "chat"))
    ap.add_argument("--only", action="store_true", help="only the --model folders")
    args = ap.parse_args()
    import numpy as np
    import torch

    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.batching import default_budget, pack
    from evaldag.engine.requests import TokenStats

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_data(tmp / "data")
        rows = [json.loads(x) for x in (tmp / "data" / "forget10_perturbed.json").read_text().splitlines()][: args.groups]
        models = {} if args.only else {"trained fixture 2x64": FIX / "tiny-llama" / "target",
                                       "random 4x256": random_llama(tmp / "m", SMALL)}
        models.update({Path(m).name: Path(m) for m in args.model})
        for name, path in models.items():
            res = HFModel(str(path))
            enc, adapter = res.encoder(), res.load()
            plain = PromptTemplate.chat() if args.template == "chat" else PromptTemplate.plain()
            groups = []
            for r in rows:
                encs = [enc.encode_qa(r["question"], a, plain) for a in [r["answer"], r["paraphrased_answer"], *r["perturbed_answer"]]]
                # open-unlearning's context is the joint tokenization's first len(prompt) ids,
                # so it can differ between answers at the boundary: share only equal contexts
                by_ctx: dict = {}
                for e in encs:
                    by_ctx.setdefault(e.context_ids, []).append(e.continuation_ids)
                groups += list(by_ctx.items())
            reqs = [TokenStats(c, a) for c, answers in groups for a in answers]
            batches = pack(reqs, TokenStats.length, default_budget("cpu"))
            gbatches = [groups[i : i + QUESTIONS_PER_BATCH] for i in range(0, len(groups), QUESTIONS_PER_BATCH)]
            t_plain, t_shared, c_plain, c_shared = [], [], [], []
            for _ in range(args.repeat):
                t, c = time.perf_counter(), time.process_time()
                got = {}
                padded = 0
                for b in batches:
                    got.update(zip(b, adapter.run_batch(b)))
                    padded += adapter.last_batch_tokens[1]
                t_plain.append(time.perf_counter() - t)
                c_plain.append(time.process_time() - c)
                t, c = time.perf_counter(), time.process_time()
                shared, fwd = [], 0
                for gb in gbatches:
                    lp, n = shared_prefix_logprobs(adapter, gb)
                    shared += lp
                    fwd += n
                t_shared.append(time.perf_counter() - t)
                c_shared.append(time.process_time() - c)
            diff = max(float(np.abs(got[r].logprob - s).max()) for r, s in zip(reqs, shared))
            real = sum(r.length() for r in reqs)
            print(f"{name}: {len(rows)} questions x 7 answers = {len(reqs)} rows, {real} tokens, {len(groups)} distinct contexts")
            med = statistics.median
            print(f"  plain  (executor batches, right padded): {med(c_plain):6.2f} CPU s, {med(t_plain):6.2f} wall s, {padded} tokens forwarded")
            print(f"  shared (question KV once):               {med(c_shared):6.2f} CPU s, {med(t_shared):6.2f} wall s, {fwd} tokens forwarded")
            print(f"  largest log-prob difference: {diff:.2e}; {metric_drift(reqs, got, shared, groups)}")
        one, five, _ = os.getloadavg()
        print(f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
