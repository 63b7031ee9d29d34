"""One rank of tests/engine/test_vllm_torchrun.py's torchrun job (run in ``$EVALDAG_VLLM_PYTHON``).

    python -m torch.distributed.run --nproc-per-node 2 --standalone tests/vllm_torchrun_driver.py \
        OUT_PREFIX EVALDAG_RUN_ARGS...

First ``evaldag run ... --model vllm:A`` as torchrun runs it (``cli.main`` on every rank; it
joins the group made here, the way it joins a training job's), then, in the same processes
(an engine start costs 10-60 s on CPU, so the test pays for it once), an engine restart
through one sharded executor: A's requests (its adapter, on the CLI's live engine), the
engine let go on every rank (as another model's load lets it go: ``vllm_engine.free``), then
ONE request of A's, which only one rank has a share of: A's engine must start again on both
ranks together (its start has collectives), not at that rank's batch while the other waits in
the exchange. Writes OUT_PREFIX.RANK.json. vLLM's engine lives in this process under
torchrun: all of it under ``__main__``.
"""

from __future__ import annotations

import json
import sys

if __name__ == "__main__":
    from evaldag.engine import cli
    from evaldag.engine.adapters import spec
    from evaldag.engine.adapters.vllm import vllm_engine
    from evaldag.engine.distributed.group import Group
    from evaldag.engine.distributed.sharded import ShardedExecutor
    from evaldag.engine.requests import TokenStats

    prefix, argv = sys.argv[1], sys.argv[2:]
    a_dir = argv[argv.index("--model") + 1].removeprefix("vllm:")
    group = Group()
    got: dict = {"cli": cli.main(argv), "engine_starts_cli": len(vllm_engine.START_SECONDS)}
    a = spec.resolve(f"vllm:{a_dir}", dtype="fp32", max_model_len=512, enforce_eager=True)
    ex = ShardedExecutor(group)
    # A first (its engine is the CLI's, still live), so this executor holds A's adapter when A comes back
    got["a"] = [r.logprob.tolist() for r in ex.serve([(a, TokenStats((1, 20 + i), (30, 40, 50 + i))) for i in range(6)])]
    vllm_engine.free()  # what loading another model does (a vllm: B, or an hf: copy on a GPU)
    got["a_again"] = [r.logprob.tolist() for r in ex.serve([(a, TokenStats((1, 7), (8, 9)))])]
    got["engine_starts"] = len(vllm_engine.START_SECONDS)
    got["by_rank"] = ex.stats.summary()["by_rank"]
    with open(f"{prefix}.{group.rank}.json", "w") as f:
        json.dump(got, f)
    group.close()
    sys.exit(got["cli"])
