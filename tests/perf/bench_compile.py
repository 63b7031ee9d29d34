"""Generation's per-step overhead: a static KV cache and ``torch.compile`` against evaldag's decode loop.

Run: python tests/perf/bench_compile.py [--model smollm2|random|FOLDER] [--prompts 16] [--new 64] [--skip-compile] [--device cuda]

The same greedy prompts (TOFU fixture questions in the model's chat template for SmolLM2,
the plain template otherwise), decoded four ways in one process, one torch thread:

* evaldag: ``HFAdapter`` on ``Generate`` requests (the lean continuous-batching loop with
  its growing cache layer: what a run does);
* generate, dynamic cache: transformers' ``generate`` on the left-padded batch;
* generate, static cache: ``cache_implementation="static"`` (a preallocated cache of the
  batch's final length), eager;
* generate, static cache + ``torch.compile`` of the forward (inductor, the default mode:
  "reduce-overhead" is CUDA graphs), first call (compile time included) and a second call
  on the same shapes (what a long run would pay per batch once compiled, if no new shape
  recompiled it).

Prints CPU and wall seconds for each and whether its strings equal evaldag's: a way
adopted must give ≥ 1.2x on generation, compile time included, without changing a string.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # compile in this process: its CPU seconds are counted
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

FIX = ROOT / "tests" / "fixtures"


def _cpu() -> float:
    """This process's CPU seconds and its finished children's (inductor compiles in worker processes)."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


class Clock:
    def __enter__(self) -> "Clock":
        self.t, self.c = time.perf_counter(), _cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.t, _cpu() - self.c


def model_folder(name: str, tmp: Path) -> Path:
    if name == "random":
        from bench_tofu_scale import SMALL, random_llama

        return random_llama(tmp / "random-4x256", SMALL)
    if name == "smollm2":
        from tests.realmodel import require

        from evaldag.engine.adapters.hf import HFModel
        from evaldag.engine.adapters.hf_gguf import as_checkpoint

        adapter = HFModel(require(), dtype="fp32", device="cpu").load()
        folder = tmp / "smollm2"
        as_checkpoint(adapter.model).save_pretrained(folder)
        adapter.tokenizer.save_pretrained(folder)
        return folder
    return Path(name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new", type=int, default=64, help="max new tokens (greedy; rows stop at eos)")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    args = ap.parse_args()
    import tempfile

    import torch

    from evaldag.engine.adapters.base import PromptTemplate
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.requests import Generate, GenerationSettings

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = model_folder(args.model, Path(tmp))
        res = HFModel(str(folder), dtype="fp32", device=args.device)
        enc, adapter = res.encoder(), res.load()
        tok, model = adapter.tokenizer, adapter.model
        chat = args.model == "smollm2"
        template = PromptTemplate.chat() if chat else PromptTemplate.plain()
        rows = [json.loads(x) for x in (FIX / "tofu_tiny" / "forget10.json").read_text().splitlines()]
        prompts = [enc.encode_qa(r["question"], r["answer"], template).context_ids for r in rows][: args.prompts]
        settings = GenerationSettings(max_new_tokens=args.new)
        reqs = [Generate(tuple(p), settings) for p in prompts]
        adapter.run_batch(reqs[:2])  # warm-up
        with Clock() as c_ev:
            ours = [r.text for r in adapter.run_batch(reqs)]
        ids, mask, _, _ = adapter.pad([r.prompt_ids for r in reqs], "left")
        pad = adapter.pad_id

        def gen(**kw):
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new, do_sample=False,
                                 pad_token_id=pad, **kw)
            new = out[:, ids.shape[1]:]
            texts = []
            for row in new.tolist():
                eos = [i for i, t in enumerate(row) if t in adapter_eos]
                texts.append(tok.decode(row[: eos[0] + 1] if eos else row, skip_special_tokens=True,
                                        clean_up_tokenization_spaces=False))
            return texts

        from evaldag.engine.adapters.hf_generation import eos_ids

        adapter_eos = eos_ids(model) | ({tok.eos_token_id} if tok.eos_token_id is not None else set())
        print(f"{folder.name}: {len(reqs)} prompts, greedy, up to {args.new} new tokens, one thread", flush=True)

        def say(name: str, c: Clock, same: bool) -> None:
            print(f"  {name:<62} {c.cpu:8.2f} CPU s {c.wall:8.2f} wall s  x{c_ev.cpu / c.cpu:5.2f} (CPU)  "
                  f"strings {'equal' if same else 'DIFFER'}", flush=True)

        lines = [("evaldag decode loop", c_ev, True)]
        say(*lines[0])
        with torch.inference_mode():
            gen()  # warm-up
            with Clock() as c:
                got = gen()
            lines.append(("generate, dynamic cache", c, got == ours))
            say(*lines[-1])
            with Clock() as c:
                got = gen(cache_implementation="static", disable_compile=True)  # no automatic compile: eager
            lines.append(("generate, static cache (eager)", c, got == ours))
            say(*lines[-1])
            if not args.skip_compile:
                model.forward = torch.compile(model.forward)
                with Clock() as c:
                    got = gen(cache_implementation="static")
                lines.append(("static cache + torch.compile, first call (compile included)", c, got == ours))
                say(*lines[-1])
                with Clock() as c:
                    got = gen(cache_implementation="static")
                lines.append(("static cache + torch.compile, second call", c, got == ours))
                say(*lines[-1])
        one, five, _ = os.getloadavg()
        print(f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
