"""A chain of 10,000 nodes built in Python: no recursion over graph depth anywhere.

Python stops at about 1,000 frames; a chain of more than ~500 metrics used to end in a
RecursionError from the graph's expansion of parents. Everything that walks the graph
(expansion, fingerprints, the run and its history slots, explain(), the drawing) must
walk it with a loop, and stay about linear in the number of nodes.
"""

import os
import sys
import tempfile
import time

import pytest

from evaldag.engine import Graph, Params, Result, metric, run
from evaldag.engine.render.dot import to_dot
from evaldag.engine.render.mermaid import to_mermaid
from evaldag.engine.resources import ResourceSet
from evaldag.engine.reasons import history_slots as _slots
from evaldag.engine.render.svg import to_svg
from evaldag.engine.views import from_graph

N = 10_000


class Step(Params):
    i: int = 0


@metric("deep_src", version="1", register=False, needs=("data",))
def deep_src(data):
    return Result(float(len(data)))


@metric("deep_step", version="1", params=Step, register=False, parents={"prev": deep_src()})
def deep_step(prev, params):
    return Result(prev.agg_value + 1.0)


def chain(n: int = N):
    """src -> step(1) -> ... -> step(n-1); only every 1000th step and the last one named."""
    node = deep_src()
    for i in range(1, n):
        name = f"step{i}" if i % 1000 == 0 or i == n - 1 else None
        node = deep_step(i=i, parents={"prev": node}, name=name)
    return node


def test_a_chain_longer_than_the_recursion_limit_builds_fingerprints_explains_and_draws():
    assert N > 5 * sys.getrecursionlimit()
    t0 = time.perf_counter()
    g, g2 = Graph([chain()]), Graph([chain()])
    assert len(g) == N
    rs = ResourceSet({"data": [1, 2, 3]})
    g.fingerprint(rs)
    g2.fingerprint(rs)
    order = g.order()
    assert [v.metric.name for v in order[:2]] == ["deep_src", "deep_step"]
    assert [v.node.params.i for v in order[1:]] == list(range(1, N))
    assert order[-1].label == f"step{N - 1}"
    assert [v.fingerprint for v in g2.order()] == [v.fingerprint for v in order]  # stable from build to build
    assert len({v.fingerprint for v in order}) == N
    ex = g.explain(f"step{N - 1}")
    assert ex["params"] == {"i": N - 1}
    assert ex["parents"]["prev"] == {"node": order[-2].label, "fingerprint": order[-2].fingerprint}
    slots = _slots(g)
    assert len(set(slots.values())) == N and max(len(s) for names in slots.values() for s in names) <= 512
    assert slots[order[-2].key] == (f"step{N - 1}.prev",)
    build = time.perf_counter() - t0

    t0 = time.perf_counter()
    view = from_graph(g)
    svg = to_svg(view)
    assert svg.count('class="ed-edge"') == N - 1 and svg.count('<g class="ed-node ') == N
    assert to_mermaid(view).count(" --> ") == N - 1
    assert to_dot(view).count(" -> ") == N - 1
    draw = time.perf_counter() - t0
    print(f"\n{N}-node chain: build twice + fingerprint + explain + slots {build:.1f} s; view + svg + mermaid + dot {draw:.1f} s")
    assert build + draw < 120  # linear; the quadratic steps took minutes (a loaded 2-core machine: ~4x slower)


# run() stores ~3 files per node: its chain is 3x the recursion limit (a walk that recursed
# once per node would stop at ~1,000), not N -- the same claim at a third of the CPU seconds
RUN_N = 3 * sys.getrecursionlimit()


@pytest.mark.slow
def test_a_chain_far_past_the_recursion_limit_runs_through_the_cache_and_reruns_from_it(tmp_path):
    """run() on the whole chain, twice: every node computed, then every node read back.

    The node store fsyncs each entry (about 3 writes per node); on tmpfs (/dev/shm) that
    costs nothing, so the test measures the engine, not the disk.
    """
    assert RUN_N >= 3000
    where = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    with tempfile.TemporaryDirectory(dir=where, prefix="evaldag-deep-") as cache:
        t0 = time.perf_counter()
        res = run(Graph([chain(RUN_N)]), {"data": [1, 2, 3]}, cache=cache)
        first = time.perf_counter() - t0
        assert res.ok and sum(r.status == "computed" for r in res.records.values()) == RUN_N
        assert res.value(f"step{RUN_N - 1}").agg_value == 3.0 + (RUN_N - 1)  # 3 rows, then +1 per step
        assert res.value("step2000").agg_value == 3.0 + 2000
        t0 = time.perf_counter()
        res2 = run(Graph([chain(RUN_N)]), {"data": [1, 2, 3]}, cache=cache)
        second = time.perf_counter() - t0
        assert sum(r.status == "cached" for r in res2.records.values()) == RUN_N
        assert res2.value(f"step{RUN_N - 1}").agg_value == 3.0 + (RUN_N - 1)
    print(f"\n{RUN_N}-node chain through run(): computed {first:.1f} s, all cached {second:.1f} s")
