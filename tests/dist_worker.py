"""One rank of a distributed ``evaldag`` run, started by tests/engine/test_distributed.py.

Usage: python dist_worker.py [--die-after-batches N] EVALDAG_ARGS...
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment, as torchrun
sets them; there is no torchrun agent, so a rank that dies is noticed by the engine
itself. ``--die-after-batches N`` makes this rank exit hard (as if killed) when it
starts its (N+1)-th batch.
"""

import os
import sys

from evaldag.engine import cli
from evaldag.engine.executor import Executor

argv = sys.argv[1:]
if argv[:1] == ["--die-after-batches"]:
    limit, argv = int(argv[1]), argv[2:]
    real_run, seen = Executor._run, []

    def dying_run(self, adapter, kind, batch):
        if len(seen) >= limit:
            os._exit(9)
        seen.append(kind)
        return real_run(self, adapter, kind, batch)

    Executor._run = dying_run
sys.exit(cli.main(argv))
