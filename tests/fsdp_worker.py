"""One rank of a 2-rank job whose weights are sharded (FSDP or FSDP2), for test_integrations_fsdp.py.

``python tests/fsdp_worker.py OUT CACHE KIND[,KIND...] METRICS`` with RANK/WORLD_SIZE/MASTER_*
set: for each KIND in turn (one job, one start-up), the tiny Llama target wrapped by KIND
(``fsdp``: FullyShardedDataParallel per decoder layer and at the root; ``fsdp2``:
``fully_shard`` likewise; ``ddp``: replicated, for comparing the evaluation's cost), 3 steps of
gradient ascent on the forget set (the Trainer does not shard on CPU, so the loop is written
out), an evaluation by ``EvaldagCallback`` after each step, and after each step the whole model
saved to ``OUT/KIND/checkpoint-N`` by rank 0 (gathered, as the Trainer saves a FULL_STATE_DICT)
and ``on_save`` called on every rank. With ``fsdp2`` a second callback asking for a gradient
metric is started too, which must be refused. Prints one JSON line: per KIND the history, each
evaluation's seconds and the refusal; and the job group's state.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))
from tiny_trainer import OPTIONS, TINY, collate, forget_rows, leave  # noqa: E402


def wrap(model, kind: str):
    import torch
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    if kind == "ddp":  # replicated weights, for comparison: the callback is given the unwrapped model, as by the Trainer
        return torch.nn.parallel.DistributedDataParallel(model)
    if kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        return fully_shard(model)
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    return FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({LlamaDecoderLayer}),
                                    device_id=torch.device("cpu"))


def main() -> None:
    import torch
    import torch.distributed as dist
    from transformers import AutoTokenizer

    out, cache, kinds, metrics = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(",")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tok = AutoTokenizer.from_pretrained(str(TINY / "target"))
    done = {kind: one(kind, out / kind, cache, metrics, tok, rank) for kind in kinds}  # in one job: one start-up
    t = torch.tensor([1.0])
    dist.all_reduce(t)  # the job's group outlived every evaluation
    print(json.dumps({"rank": rank, "sum": t.item(), "kinds": done}))
    leave()


def one(kind: str, out: Path, cache: str, metrics: list[str], tok, rank: int) -> dict:
    """Train the tiny target 3 steps wrapped by ``kind``, evaluated and saved at each."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from evaldag.engine.distributed import lockstep
    from evaldag.engine.integrations import EvaldagCallback

    torch.manual_seed(0)
    trained = wrap(AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32), kind)
    model = trained.module if kind == "ddp" else trained
    opt = torch.optim.SGD(trained.parameters(), lr=3e-3)
    rows = forget_rows(tok)
    # prefix_sharing off: the sharded model forwards every sequence whole, and so does the retain model then,
    # so the one-process CLI runs the test holds this to (--prefix-sharing off) match bit for bit
    cb = EvaldagCallback("tofu", every_n_steps=1, tokenizer=tok, output_dir=str(out), cache_dir=cache,
                         **{**OPTIONS, "metrics": metrics, "prefix_sharing": "off"})
    args = SimpleNamespace(output_dir=str(out))
    control = SimpleNamespace(should_training_stop=False)
    cb.on_train_begin(args, SimpleNamespace(global_step=0), control, model=model)
    seconds = []  # each evaluation's wall time on this rank
    for step in (1, 2, 3):
        trained.train()
        batch = collate(rows[2 * rank : 2 * rank + 2])  # each rank its own rows, as a DDP sampler gives
        loss = -trained(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        state = SimpleNamespace(global_step=step, is_world_process_zero=rank == 0)
        t0 = time.perf_counter()
        cb.on_step_end(args, state, control, model=model)
        seconds.append(round(time.perf_counter() - t0, 3))
        whole = lockstep.full_state_dict(model) if kind != "ddp" else model.state_dict()  # as the Trainer saves
        if rank == 0:
            unwrapped = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32)
            unwrapped.save_pretrained(str(out / f"checkpoint-{step}"), state_dict=whole)
            tok.save_pretrained(str(out / f"checkpoint-{step}"))
        dist.barrier()
        cb.on_save(args, state, control, model=model)
    refused = None
    if kind == "fsdp2":  # a metric sharded weights cannot serve: refused when the callback starts, in one line
        bad = EvaldagCallback("tofu", every_n_steps=1, tokenizer=tok, output_dir=str(out / "bad"), cache_dir=cache,
                              **{**OPTIONS, "metrics": ["forget_Q_A_Prob", "mia_gradnorm"]})
        try:
            bad.on_train_begin(args, SimpleNamespace(global_step=0), control, model=model)
        except ValueError as e:
            refused = str(e)
    return {"sharded": cb._sharded, "seconds": seconds, "refused": refused, "fingerprint": cb._last[1],
            "history": [{"step": h["step"], "exit": h["exit"], "summary": h["summary"]} for h in cb.history]}


if __name__ == "__main__":
    main()
