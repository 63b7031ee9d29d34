"""Build the assets behind ``evaldag demo``: data, tokenizer, three tiny checkpoints.

Run ``python -m tests.asset_builders.demo.make_assets`` (from the repository root) to rewrite the package's
``benchmarks/demo/assets/`` folder, or ``--out DIR`` to write elsewhere. Offline, CPU,
one thread, fixed seeds; a few minutes at most on a 2-core laptop. Steps:

1. ``data/``: fictitious authors in TOFU's format (:mod:`.authors`).
2. A byte-level BPE tokenizer (vocab 1024; bos ``<|begin_of_text|>``, eos
   ``<|endoftext|>``, pad ``<pad>``) trained in-process with ``tokenizers``.
3. ``models/target`` (fine-tuned on every author, forget included), ``models/retain``
   (never sees the two forget authors) and ``models/unlearned`` (``target`` after a few
   gradient-ascent steps on ``forget10``): ``LlamaForCausalLM``, 2 layers, hidden 64,
   4 heads, MLP 128, tied embeddings, fp32 safetensors. Each holds the tokenizer too.
4. A check that the models show the signal the demo is about (forget probability,
   forget quality, ROUGE), printed as a table and written to ``manifest.json`` together
   with the sha256 of every file.

Training uses open-unlearning's plain template exactly as it tokenizes for evaluation:
``tokenizer("Question: {q}\\nAnswer: " + answer)`` (bos added by the tokenizer), eos
appended, loss on the tokens after ``len(tokenizer(prompt))`` only.

The tokenizer splits text into words that *carry their trailing space* ("Answer: " is
one piece) before byte-level BPE. So the prompt's tokens are always a prefix of the
prompt+answer tokens: no answer token is lost at the boundary (open-unlearning issue
#195 does not arise) and greedy generation starts from a token sequence the model saw
in training.
"""


from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from . import authors
from .signal_check import check_orderings, environment, file_hashes, format_table, model_signal, summarize
from .training import (  # noqa: F401  (prompt_of and the tokenizer helpers are used by the tests)
    DEFAULT_OUT,
    MODEL,
    MODELS,
    TRAIN,
    UNLEARN,
    _dump_json,
    deterministic_torch,
    load_model,
    load_tokenizer,
    prompt_of,
    save_model,
    tokenizer_files,
    tokenizer_texts,
    train,
    train_tokenizer,
    unlearn,
)


# ---------------------------------------------------------------- main

def build_data(out: Path, seed: int = authors.SEED) -> authors.DemoData:
    return authors.write(out / "data", seed)


def build_all(out: Path, log=print) -> dict[str, Any]:
    """Write every asset into ``out``; return the manifest (also written to ``manifest.json``).
    ``log=None`` keeps it quiet."""
    log = log or (lambda *_: None)
    with deterministic_torch():
        return _build_all(out, log)


def _build_all(out: Path, log) -> dict[str, Any]:
    # Start from a clean slate so that manifest.json lists exactly what this run wrote.
    for stale in [out / "data", out / "tokenizer", *(out / "models" / name for name in MODELS)]:
        if stale.is_dir():
            shutil.rmtree(stale)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    data = build_data(out)
    timings["data"] = time.perf_counter() - t0

    t = time.perf_counter()
    tok_files = tokenizer_files(train_tokenizer(tokenizer_texts(data)))
    tok_dir = out / "tokenizer"
    tok_dir.mkdir(parents=True, exist_ok=True)
    for name, body in tok_files.items():
        (tok_dir / name).write_bytes(body)
    tokenizer = load_tokenizer(tok_dir)
    timings["tokenizer"] = time.perf_counter() - t

    models: dict[str, Any] = {}
    for name, include_forget in (("target", True), ("retain", False)):
        log(f"training {name} ...")
        t = time.perf_counter()
        models[name] = train(tokenizer, authors.training_pairs(data, include_forget), **TRAIN, log=log)
        timings[name] = time.perf_counter() - t
    log("unlearning (gradient ascent on forget10) ...")
    t = time.perf_counter()
    models["unlearned"] = unlearn(models["target"], tokenizer, data.subsets["forget10"], **UNLEARN, log=log)
    timings["unlearned"] = time.perf_counter() - t
    for name in MODELS:
        save_model(models[name], tok_files, out / "models" / name)

    t = time.perf_counter()
    signals = {name: model_signal(load_model(out / "models" / name), tokenizer, data) for name in MODELS}
    table = summarize(signals)
    timings["check"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    log(format_table(table))
    fails = check_orderings(table)
    for f in fails:
        log(f"SIGNAL CHECK FAILED: {f}")

    manifest = {
        "generated_by": "python -m tests.asset_builders.demo.make_assets",
        "seeds": {"data": authors.SEED, "train": TRAIN["seed"]},
        "train": TRAIN,
        "unlearn": UNLEARN,
        "model": MODEL,
        "environment": environment(),
        "signal": table,
        "signal_ok": not fails,
        "files": file_hashes(out),
    }
    (out / "manifest.json").write_bytes(_dump_json(manifest))
    log("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    manifest["timings"] = timings
    manifest["signals"] = signals
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="folder to write (default: the package's assets folder); its data/, "
                             "tokenizer/ and models/{target,retain,unlearned}/ are replaced")
    parser.add_argument("--data-only", action="store_true", help="write data/ only (seconds)")
    args = parser.parse_args(argv)
    if args.data_only:
        build_data(args.out)
        return 0
    manifest = build_all(args.out)
    return 0 if manifest["signal_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
