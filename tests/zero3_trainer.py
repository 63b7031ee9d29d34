"""One rank of a 2-rank DeepSpeed ZeRO-3 Trainer run on CPU, for test_integrations_fsdp.py.

``python tests/zero3_trainer.py OUT CACHE`` with RANK/WORLD_SIZE/MASTER_* set: the tiny
Trainer of tiny_trainer.py (gradient ascent on the forget set) with a ZeRO stage-3 config
(every parameter partitioned: persistence threshold 0; the whole model gathered into
``model.safetensors`` at each save), 4 steps saved every 2, ``EvaldagCallback`` evaluating
at each save. DeepSpeed runs on CPU over gloo (its CPU accelerator; no Intel extension).
Prints one JSON line: what the callback saw and the numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tiny_trainer import OPTIONS, leave, make_trainer  # noqa: E402

ZERO3 = {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                               "stage3_gather_16bit_weights_on_model_save": True},
         "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
         "zero_allow_untested_optimizer": True,
         "optimizer": {"type": "AdamW", "params": {"lr": "auto", "torch_adam": True}}}


def main() -> None:
    import deepspeed
    import deepspeed.comm.torch  # noqa: F401 - its build_shm_op, replaced below
    import torch.distributed as dist

    from evaldag.engine.integrations import EvaldagCallback

    out, cache = Path(sys.argv[1]), sys.argv[2]
    # DeepSpeed's CPU accelerator compiles a shared-memory all-reduce the first time (about 120 s
    # here, once per machine); gloo does the same reductions, so the test goes without it
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # (deepspeed.comm.torch is PyTorch itself)
    deepspeed.init_distributed(dist_backend="gloo")  # before the model: DeepSpeed's config then sees 2 ranks
    trainer = make_trainer(out, steps=4, save_steps=2, deepspeed=ZERO3)
    cb = EvaldagCallback.for_trainer(trainer, "tofu", on_save=True, cache_dir=cache,
                                     **{**OPTIONS, "metrics": ["forget_Q_A_Prob", "forget_Q_A_ROUGE", "forget_quality"],
                                        "prefix_sharing": "off"})  # as the CLI runs it is held to
    trainer.train()
    emb = trainer.model.get_input_embeddings().weight
    print(json.dumps({"rank": dist.get_rank(), "sharded": cb._sharded, "partitioned": list(emb.shape) == [0],
                      "engine": type(trainer.model_wrapped).__name__,
                      "history": [{"step": h["step"], "exit": h["exit"], "summary": h["summary"]} for h in cb.history],
                      "fingerprint": cb._last[1]}))
    leave()


if __name__ == "__main__":
    main()
