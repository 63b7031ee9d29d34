"""A graph of slow, counted nodes, run as a separate process by the engine tests.

Usage: python engine_graph_worker.py CACHE_DIR MARKER_DIR SLEEP [SCALE]
Each node appends its name to MARKER_DIR/computed.log when its function runs, so the
tests can count computations across processes; the run's summary is printed as JSON.
"""

import json
import os
import sys
import time

from evaldag.engine import Params, Result, metric, run

CACHE, MARKERS, SLEEP = sys.argv[1], sys.argv[2], float(sys.argv[3])
SCALE = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0


def mark(name):
    with open(os.path.join(MARKERS, "computed.log"), "a") as f:
        f.write(f"{name} {os.getpid()}\n")


class P(Params):
    i: int
    scale: float = 1.0


@metric("w_leaf", version="1", params=P, register=False)
def leaf(params):
    time.sleep(SLEEP)
    mark(f"leaf{params.i}")
    return Result(params.i * params.scale, {str(k): {"x": k * params.i} for k in range(3)})


@metric("w_sum", version="1", register=False, parents={})
def total(**parents):
    time.sleep(SLEEP)
    mark("total")
    return Result(sum(p.agg_value for p in parents.values()))


leaves = {f"l{i}": leaf(i=i, scale=SCALE, name=f"leaf{i}") for i in range(6)}
root = total(parents=leaves, name="total")
res = run([root], {}, cache_dir=CACHE)
print(json.dumps({"total": res["total"].agg_value, "computed": res.count("computed"), "cached": res.count("cached")}))
