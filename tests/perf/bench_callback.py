"""The callback's overhead: a tiny Trainer run on CPU without and with EvaldagCallback.

Run: python tests/perf/bench_callback.py [STEPS] [EVERY]
Prints the training time alone, with the callback, the time of each evaluation (the first
also forwards the retain model; later ones read it from the cache), the time of hashing the
in-memory weights (the fingerprint) and of recording a checkpoint's alias, and the per-step
overhead. CPU-bound: run it on an idle machine for figures worth quoting.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from tiny_trainer import OPTIONS, make_trainer  # noqa: E402

from evaldag.engine.adapters import hf  # noqa: E402
from evaldag.engine.integrations import EvaldagCallback  # noqa: E402
from evaldag.engine.integrations import callback as cbmod  # noqa: E402


def timed(fn, sink: list):
    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            sink.append(time.perf_counter() - t0)
    return wrapper


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    every = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_trainer(root / "warmup", 2).train()  # lazy imports and first-call costs out of both timings
        t0, c0 = time.perf_counter(), time.process_time()
        make_trainer(root / "plain", steps, save_steps=every).train()
        plain, plain_cpu = time.perf_counter() - t0, time.process_time() - c0

        evals, hashes, alias = [], [], []
        EvaldagCallback.evaluate = timed(EvaldagCallback.evaluate, evals)
        EvaldagCallback.alias_checkpoint = timed(EvaldagCallback.alias_checkpoint, alias)
        hf._state_dict_digest = timed(hf._state_dict_digest, hashes)
        trainer = make_trainer(root / "with", steps, save_steps=every)
        cbmod.EvaldagCallback.for_trainer(trainer, "tofu", on_save=True, cache_dir=str(root / "cache"), **OPTIONS)
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train()
        with_cb, with_cpu = time.perf_counter() - t0, time.process_time() - c0
    n = len(evals)
    print(f"steps {steps}, evaluations {n} (every {every} steps, at each save)")
    print(f"training alone        {plain:8.2f} s wall, {plain_cpu:.2f} s CPU")
    print(f"training + callback   {with_cpu:8.2f} s CPU   overhead {with_cpu - plain_cpu:.2f} s CPU "
          f"({(with_cpu - plain_cpu) / max(plain_cpu, 1e-9) * 100:.0f} %)")
    print(f"training + callback   {with_cb:8.2f} s   overhead {with_cb - plain:.2f} s "
          f"({(with_cb - plain) / max(plain, 1e-9) * 100:.0f} %), {(with_cb - plain) / steps * 1000:.0f} ms/step")
    print("evaluations           " + ", ".join(f"{t:.2f}" for t in evals) + " s (first: also the retain model)")
    print(f"weights hashed        {sum(hashes) / max(len(hashes), 1) * 1000:.1f} ms per evaluation")
    print(f"alias per checkpoint  {sum(alias) / max(len(alias), 1) * 1000:.1f} ms (tensors compared, files hashed)")


if __name__ == "__main__":
    main()
