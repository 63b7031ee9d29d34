"""Benchmark: the causal trace through the executor against ROME's loop of single forwards.

Run on purpose (pytest does not collect ``bench_*.py``)::

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python tests/perf/bench_editing.py [--edits 4] [--samples 10]

Both sides trace the shipped edits on the demo checkpoint (restoring the block output at
every (position, layer) cell, the same noise seed):

* naive: ROME's ``trace_with_patch``, one forward of ``samples + 1`` rows per cell
  (tests/editing_reference.py);
* evaldag: the ``causal_trace`` node; the executor packs cells into batches, each batch is
  two forwards (a clean pass and one corrupted pass over every cell's rows);
* warm: the same node recomputed (``force=True``) over the same request cache.

It prints forward passes per cell, wall time, and the largest difference between the grids.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "benchmarks" / "demo" / "assets" / "models" / "target"
sys.path.insert(0, str(ROOT / "tests"))

from editing_reference import rome_trace  # noqa: E402  (a test helper, found through sys.path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edits", type=int, default=4)
    ap.add_argument("--samples", type=int, default=10)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaldag.benchmarks.editing.data import load_edits
    from evaldag.engine import run
    from evaldag.engine.adapters import HFModel
    from evaldag.engine.adapters.hf.hf_encoder import HFEncoder
    from evaldag.metrics.editing.prompts import encode, subject_range
    from evaldag.metrics.editing.causal_trace import causal_trace

    torch.set_num_threads(1)
    edits = load_edits()[: args.edits]
    node = causal_trace(name="trace", samples=args.samples, noise=0.4, occurrence="last")
    # loaded before either clock starts, so neither side pays for the imports; evaldag loads its own copy
    tok, model = AutoTokenizer.from_pretrained(BASE), AutoModelForCausalLM.from_pretrained(BASE).eval()
    t0 = time.perf_counter()
    enc, grids = HFEncoder(tok), []
    for e in edits:
        ids = encode(enc, e["prompt"])
        grids.append(rome_trace(model, list(ids), subject_range(enc, ids, e["subject"], occurrence="last"), 0.4,
                                args.samples, 1, "hidden", 1)[0])
    naive = time.perf_counter() - t0
    cells = sum(g.size for g in grids)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = run([node], {"base_model": HFModel(BASE), "edits": edits}, cache_dir=tmp)
        ours = time.perf_counter() - t0
        st = res.executor["by_kind"]["causal_trace"]
        t0 = time.perf_counter()
        warm = run([node], {"base_model": HFModel(BASE), "edits": edits}, cache_dir=tmp, force=True)
        warm_s = time.perf_counter() - t0
        warm_st = warm.executor["by_kind"]["causal_trace"]
    worst = max(float(np.abs(g - np.array(res["trace"].value_by_index[str(i)]["scores"])).max()) for i, g in enumerate(grids))
    print(f"edits {len(edits)}, cells {cells}, samples {args.samples}")
    print(f"naive (ROME loop): {cells + len(edits)} forwards, {(cells + len(edits)) / cells:.2f} per cell, "
          f"{naive:.2f} s (model already loaded)")
    print(f"evaldag: {st['batches'] * 2} forwards in {st['batches']} batches, {2 * st['batches'] / st['unique']:.3f} per cell; "
          f"whole run {ours:.2f} s (graph, caches, its own model load), executor {st['seconds']:.2f} s; "
          f"naive / whole run = {naive / ours:.1f}x")
    print(f"warm rerun (node recomputed, cells from the request cache): {warm_st['cached']}/{warm_st['unique']} cells cached, "
          f"{warm_st['sequences_forwarded']} forwarded, {warm_s:.2f} s")
    print(f"largest |difference| between the grids: {worst:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
