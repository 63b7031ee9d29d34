"""Shared question prefixes (on by default): the executor's token statistics with the
question's KV computed once for its answers (``--prefix-sharing on``), against every
sequence forwarded whole (``--prefix-sharing off``): speed, and what it does to the numbers.

Run: python tests/perf/bench_prefix_sharing.py [--groups 400] [--repeat 2] [--model PATH --template chat]

Workload: TOFU forget10-size truth-ratio rows (bench_tofu_scale.write_data): each
question with its answer, paraphrased answer and five perturbed answers, tokenized as
open-unlearning does (prompt and answer apart). Two models: the trained tiny fixture
(2 x 64) and the random 4 x 256 Llama of bench_tofu_scale; ``--model`` adds a folder of
your own (SmolLM2-135M-Instruct: bench_floor's docstring), ``--template chat`` its chat
template.

* plain: ``Executor(prefix_sharing=False)``: packed longest first under the CPU budget,
  right padded, every sequence whole.
* shared: ``Executor()`` (the default): each question's answers packed into one batch
  (batching.pack_by_prefix), the distinct questions forwarded once, left padded, into a
  KV cache, the answers on top of it (adapters/hf_prefix.py).

``--tofu-run FOLDER [--limit N]``: instead, the whole ``evaldag run tofu`` (bench_floor's
metrics) on that model twice in this process, ``--prefix-sharing off`` then on, each with a
fresh cache after a discarded warm-up run: CPU seconds by request kind and for the whole
run, and per TOFU metric the largest relative change of any number of its TOFU_EVAL entry
and of its summary value.

Prints CPU and wall seconds (median of --repeat; a fresh executor each time, no request
store), tokens forwarded, the largest log-prob difference between the two, and what that
does to the metrics computed from them: the largest relative change of a row's probability
(exp of the mean log-prob, as ``*_Q_A_Prob``) and of a question's truth ratio, against the
golden outputs' tolerance (2e-5 relative, tests/fidelity/test_golden_outputs.py).
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
from drift import numbers  # noqa: E402


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


def tofu_run(folder: Path, limit: str, template: str) -> None:
    """The whole run, off then on: CPU seconds by kind, and every TOFU number's change."""
    from bench_floor import METRICS, record_run

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = ["run", "tofu", "--quiet", "--model", str(folder), "--data", str(FIX / "tofu_tiny"), "--metrics", METRICS,
                "--template", template]
        record_run(base + ["--limit", "1", "--out", str(tmp / "w"), "--cache-dir", str(tmp / "cw")])  # warm-up
        got = {}
        for way in ("off", "on"):
            _, spent, run, whole = record_run(base + ["--limit", limit, "--prefix-sharing", way, "--out", str(tmp / way),
                                                      "--cache-dir", str(tmp / f"c{way}")])
            ev = json.loads((tmp / way / "TOFU_EVAL.json").read_text())
            sm = json.loads((tmp / way / "TOFU_SUMMARY.json").read_text())
            got[way] = (spent, whole, ev, sm, run)
        print(f"{folder.name}, --template {template}, --limit {limit}: evaldag run tofu, off then on, one thread")
        for kind in sorted(got["off"][0]):
            off, on = got["off"][0][kind][1], got["on"][0].get(kind, [0, 0])[1]
            print(f"  {kind:<12} off {off:7.2f} CPU s   on {on:7.2f} CPU s   x{off / on if on else float('nan'):.2f}")
        w_off, w_on = got["off"][1], got["on"][1]
        print(f"  whole run    off {w_off.cpu:7.2f} CPU s   on {w_on.cpu:7.2f} CPU s   x{w_off.cpu / w_on.cpu:.2f} "
              f"(wall {w_off.wall:.1f} / {w_on.wall:.1f})")
        print(f"  served: {[k.get('token_stats') for k in got['on'][4]['executor'].get('served', {}).values()]}")
        ev_off, ev_on, sm_off, sm_on = got["off"][2], got["on"][2], got["off"][3], got["on"][3]
        for metric in sorted(ev_off):
            a, b = numbers(ev_off[metric]), numbers(ev_on[metric])
            rel = max((abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k])) for k in a if k in b and a[k] != b[k]), default=0.0)
            s_off, s_on = sm_off.get(metric), sm_on.get(metric)
            srel = (abs(s_off - s_on) / max(abs(s_off), abs(s_on))
                    if isinstance(s_off, float) and isinstance(s_on, float) and s_off != s_on else 0.0)
            print(f"  {metric:<28} summary {s_off!s:>24} -> {s_on!s:<24} rel {srel:.1e}; largest over its EVAL numbers {rel:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--model", action="append", default=[], help="another model folder (repeatable)")
    ap.add_argument("--template", default="plain", choices=("plain", "chat"))
    ap.add_argument("--only", action="store_true", help="only the --model folders")
    ap.add_argument("--tofu-run", default=None, metavar="FOLDER", help="the whole evaldag run tofu, off then on")
    ap.add_argument("--limit", default="10", help="with --tofu-run: rows a split")
    args = ap.parse_args()
    if args.tofu_run:
        return tofu_run(Path(args.tofu_run), args.limit, args.template)
    import numpy as np
    import torch

    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.executor import Executor
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
            enc = res.encoder()
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
            for share in (False, True):  # warm-up: the first forward passes of a process pay one-time costs
                Executor(prefix_sharing=share).serve([(res, r) for r in reqs[:14]])
            t_plain, t_shared, c_plain, c_shared = [], [], [], []
            for _ in range(args.repeat):
                runs = {}
                for share, t_list, c_list in ((False, t_plain, c_plain), (True, t_shared, c_shared)):
                    ex = Executor(prefix_sharing=share)
                    before = dict(res.load().prefixes.counts)  # the adapter counts over its life
                    t, c = time.perf_counter(), time.process_time()
                    got = ex.serve([(res, r) for r in reqs])
                    t_list.append(time.perf_counter() - t)
                    c_list.append(time.process_time() - c)
                    after = res.load().prefixes.counts
                    runs[share] = (got, ex.stats.by_kind["token_stats"], {k: v - before[k] for k, v in after.items()})
            (plain_got, plain_st, _), (shared_got, shared_st, account) = runs[False], runs[True]
            got = dict(zip(reqs, plain_got))
            shared = [s.logprob for s in shared_got]
            diff = max(float(np.abs(got[r].logprob - s).max()) for r, s in zip(reqs, shared))
            real = sum(r.length() for r in reqs)
            print(f"{name}: {len(rows)} questions x 7 answers = {len(reqs)} rows, {real} tokens, {len(groups)} distinct contexts")
            med = statistics.median
            print(f"  plain  (--prefix-sharing off): {med(c_plain):6.2f} CPU s, {med(t_plain):6.2f} wall s, "
                  f"{plain_st.tokens_padded} tokens forwarded in {plain_st.batches} batches")
            print(f"  shared (the default):          {med(c_shared):6.2f} CPU s, {med(t_shared):6.2f} wall s, "
                  f"{shared_st.tokens_padded} tokens forwarded in {shared_st.batches} batches "
                  f"({account['rows']} rows on {account['contexts']} shared contexts)")
            print(f"  speed-up (CPU): {med(c_plain) / med(c_shared):.2f}x; largest log-prob difference: {diff:.2e}; "
                  f"{metric_drift(reqs, got, shared, groups)}")
        one, five, _ = os.getloadavg()
        print(f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
