"""Data-parallel runs over torch.distributed: gloo, CPU processes, 127.0.0.1 only.

The end-to-end tests start real processes (torchrun, or bare ranks from
tests/dist_worker.py when the test needs to see how the engine itself reacts to a dead
peer) on a small TOFU graph of the tiny checkpoints, and compare with one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaldag.engine import cli
from evaldag.engine.cli.main import parser
from evaldag.engine.adapters.toy import ToyAdapter, ToyModel
from evaldag.engine.distributed import ShardedExecutor, partition
from evaldag.engine.distributed.wire import encode_results
from evaldag.engine.distributed.launch import torchrun_command
from evaldag.engine.cache import RequestStore
from evaldag.engine.requests import TokenStats

from .. import ranks
from ..servers import free_port

FIX = Path(__file__).parents[1] / "fixtures"
BIN = Path(sys.executable).parent
WORKER = Path(__file__).parents[1] / "dist_worker.py"
ARGS = ["run", "tofu", "--model", str(FIX / "tiny-llama" / "target"), "--data", str(FIX / "tofu_tiny"),
        "--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE", "--max-new-tokens", "8", "--quiet"]
LIMIT_S = 240  # a hung test fails instead of blocking the suite


def _env(**extra: str) -> dict:
    # GLOO_SOCKET_IFNAME=lo keeps gloo's own connections on the loopback interface
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "GLOO_SOCKET_IFNAME": "lo",
            "MASTER_ADDR": "127.0.0.1", **extra}


def _run(cmds: list[list[str]], logs: Path, **env: str) -> list[tuple[int, str]]:
    """Start the commands at once, wait for all: [(exit code, stderr)] (tests/ranks.py)."""
    return [(d.code, d.err) for d in ranks.run({f"job{i}": c for i, c in enumerate(cmds)}, _env(**env), logs, LIMIT_S)]


def _ranks(argvs: list[list[str]], port: int, logs: Path, **env: str) -> list[tuple[int, str]]:
    """Start one bare rank per argv (no torchrun agent) and wait for all of them."""
    done = ranks.ranks([[sys.executable, str(WORKER), *a] for a in argvs], _env(MASTER_PORT=str(port), **env), logs, LIMIT_S)
    return [(d.code, d.err) for d in done]


def _executor(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())["executor"]


def _same_outputs(a: Path, b: Path) -> None:
    for name in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """The reference: the same run in one process."""
    tmp = tmp_path_factory.mktemp("one")
    assert cli.main([*ARGS, "--out", str(tmp / "out"), "--cache-dir", str(tmp / "cache")]) == 0
    return tmp / "out"


# ----------------------------------------------------------------------------- the partition


def test_partition_deals_longest_first_to_the_least_loaded_rank():
    # 9 -> r0; 8 -> r1; 5 -> r1 (8 < 9); 4 -> r0 (9 < 13); 1 -> r0 (13 = 13, lowest rank)
    assert partition([5, 9, 1, 8, 4], 2) == [1, 0, 0, 1, 0]
    assert partition([3, 3, 3], 3) == [0, 1, 2]
    assert partition([], 4) == []


def test_partition_carries_the_load_across_groups():
    load = [0, 0]
    assert partition([10, 2], 2, load) == [0, 1]
    assert partition([7], 2, load) == [1]  # rank 1 had 2, rank 0 had 10
    assert load == [10, 9]


def test_launcher_hands_torchrun_the_same_command_without_its_own_options():
    argv = [*ARGS, "--launcher", "torchrun", "--nproc-per-node=2"]
    args = parser(["tofu"]).parse_args(argv)
    cmd = torchrun_command(argv, args.nproc_per_node, args.nnodes, args.rdzv_endpoint)
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    assert cmd[5:] == ["--standalone", "-m", "evaldag.engine.cli", *ARGS]


def test_each_rank_starts_the_cli_without_runpys_already_imported_warning():
    """``-m evaldag.engine.cli.main`` printed a RuntimeWarning per rank."""
    done = subprocess.run([sys.executable, "-W", "default", "-m", "evaldag.engine.cli", "list"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "tofu" in done.stdout
    assert "RuntimeWarning" not in done.stderr and "found in sys.modules" not in done.stderr, done.stderr


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_two_nodes_give_the_one_process_outputs_and_a_warm_rerun_forwards_nothing(one_process, tmp_path):
    port, out, cache = free_port(), tmp_path / "out", tmp_path / "cache"
    run = [*ARGS, "--out", str(out), "--cache-dir", str(cache)]
    # two torchrun "nodes" of one rank each, meeting at a c10d rendezvous on 127.0.0.1
    node = [str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "test", "--local-addr", "127.0.0.1",
            "--no-python", str(BIN / "evaldag"), *run]
    for code, err in _run([node, node], tmp_path / "logs"):
        assert code == 0, err[-3000:]
    _same_outputs(out, one_process)
    ex, ref = _executor(out), _executor(one_process)
    assert ex["world_size"] == 2 and ex["sequences_forwarded"] == ref["sequences_forwarded"] > 50
    rows = [ex["by_rank"][r]["sequences_forwarded"] for r in ("0", "1")]
    assert sum(rows) == ref["sequences_forwarded"]
    assert all(0.35 * sum(rows) <= n <= 0.65 * sum(rows) for n in rows), rows
    assert RequestStore(cache).count() == ref["unique"]  # rank 0 wrote every rank's results

    # the same cache, one node of two ranks started by evaldag itself (it execs torchrun
    # --standalone: localhost), only rank 0 reading the cache and sending the cached nodes to
    # rank 1: nothing to forward on any rank, no model loaded
    (code, err), = _run([[str(BIN / "evaldag"), *run, "--out", str(tmp_path / "warm"), "--launcher", "torchrun",
                          "--nproc-per-node", "2"]], tmp_path / "logs-warm", EVALDAG_DIST_CACHE_READS="rank0")
    assert code == 0, err[-3000:]
    assert "found in sys.modules" not in err  # no runpy warning per rank
    warm = _executor(tmp_path / "warm")
    assert [warm["by_rank"][r]["sequences_forwarded"] for r in ("0", "1")] == [0, 0]
    assert warm["sequences_forwarded"] == 0 and not warm["model_loaded"]
    _same_outputs(tmp_path / "warm", one_process)


@pytest.mark.slow
def test_a_killed_rank_fails_the_job_clearly_and_a_rerun_resumes(one_process, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    run = [*ARGS, "--out", str(out), "--cache-dir", str(cache)]
    t0 = time.monotonic()
    (code0, err0), (code1, _) = _ranks([run, ["--die-after-batches", "1", *run]], free_port(), tmp_path / "logs",
                                            EVALDAG_DIST_TIMEOUT="60")
    assert code1 == 9 and code0 == 1
    assert time.monotonic() - t0 < 120
    assert "lost the other ranks" in err0 and "rerun the same command to resume" in err0, err0[-2000:]
    assert not (out / "TOFU_EVAL.json").exists()  # no outputs from a broken job
    done = RequestStore(cache).count()  # rank 0's finished batches, each whole
    assert 0 < done < _executor(one_process)["unique"]

    # the rerun on two ranks, with only rank 0 reading the request cache (the mode for a cache
    # on a network file system), forwards only the rest
    for code, err in _ranks([run, run], free_port(), tmp_path / "logs-rerun", EVALDAG_DIST_CACHE_READS="rank0"):
        assert code == 0, err[-3000:]
    ex = _executor(out)
    # the killed job's cheap round (the 40 forget answers' token statistics) finished and its node was
    # stored before the generations started: the rerun takes that node from the node store and asks
    # only for generations, the stored ones from the request store
    nodes = json.loads((out / "run.json").read_text())["nodes"]
    assert [n["status"] for k, n in nodes.items() if k.startswith("qa_stats")] == ["cached"]
    assert ex["cached"] == done - 40 and ex["sequences_forwarded"] == _executor(one_process)["unique"] - done
    _same_outputs(out, one_process)


@pytest.mark.slow
def test_ranks_with_different_plans_are_refused_before_any_forward_pass(tmp_path):
    run = [*ARGS, "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    other = [*run, "--metrics", "forget_Q_A_Prob"]  # rank 1 was given other metrics
    (code0, err0), (code1, err1) = _ranks([run, other], free_port(), tmp_path / "logs")
    assert code0 == code1 == 2
    for err in (err0, err1):
        assert "rank 1 built a different plan from rank 0" in err and "only on rank 0: forget_Q_A_ROUGE" in err, err[-2000:]
    assert RequestStore(tmp_path / "cache").count() == 0


@pytest.mark.slow
def test_one_ranks_own_set_up_failure_stops_every_rank_at_once(tmp_path):
    """Rank 1's cache folder is not a cache (the ranks of a job on different machines, or a race on
    a new folder): rank 1 says why and rank 0 says which rank failed and why. Before, rank 0 said only
    that it lost the other ranks in the plan check, once rank 1 had closed the group; in a training
    job's group, which the failing rank leaves up (integrations/), it waited there for the job's
    timeout (half an hour by default) while rank 1 trained on."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("years of work")
    run = [*ARGS, "--out", str(tmp_path / "out")]
    t0 = time.monotonic()
    (code0, err0), (code1, err1) = _ranks([[*run, "--cache-dir", str(tmp_path / "cache")],
                                           [*run, "--cache-dir", str(foreign)]], free_port(), tmp_path / "logs",
                                          EVALDAG_DIST_TIMEOUT="600")
    assert time.monotonic() - t0 < 120
    assert code0 == code1 == 2
    assert f"evaldag: error: --cache-dir {foreign}: the folder is not empty and has no evaldag-cache.json" in err1, err1[-2000:]
    assert "evaldag: error: rank 1 failed during the set-up: NotACache: --cache-dir" in err0, err0[-2000:]
    assert "every rank stops" in err0 and "Traceback" not in err0 + err1
    assert not (tmp_path / "out").exists() and (foreign / "thesis.tex").read_text() == "years of work"


def test_an_unreachable_rendezvous_times_out_with_a_clear_message(tmp_path):
    t0 = time.monotonic()
    # rank 1 of 2 waits for a rank 0 that never starts
    (code, err), = _run([[str(BIN / "evaldag"), "run", "toy", "--quiet", "--out", str(tmp_path / "o"),
                          "--cache-dir", str(tmp_path / "c")]], tmp_path / "logs", RANK="1", LOCAL_RANK="0",
                        WORLD_SIZE="2", MASTER_PORT=str(free_port()), EVALDAG_DIST_TIMEOUT="2")
    assert code == 2
    assert time.monotonic() - t0 < 60
    assert "rank 1 of 2 could not join the process group at 127.0.0.1:" in err and "within 2 s" in err, err[-2000:]


# ----------------------------------------------------------------------------- one rank's failure, in process


class _RankZeroOfTwo:
    """Rank 0 of a two-rank group whose rank 1 sends ``answer`` at every exchange."""

    rank, world, is_writer, broken = 0, 2, True, None

    def __init__(self, answer: bytes):
        self.answer = answer

    def same(self, text, what):
        return []

    def min_ints(self, values, what):
        return [int(v) for v in values]

    def raise_if_any(self, error, what):
        if error is not None:
            raise RuntimeError(f"rank 0 failed during {what}: {error}")

    def gather_bytes(self, blob, what):
        return [blob, self.answer]


def _stats_requests(n: int) -> list:
    return [TokenStats((1, 2 + i % 5), tuple(range(3, 4 + i))) for i in range(n)]


def _zero_counts() -> dict:
    return {k: 0 for k in ("sequences_forwarded", "tokens_real", "tokens_padded", "batches", "oom_retries", "seconds")}


def test_a_failure_on_another_rank_fails_the_request_group_and_keeps_this_ranks_results(tmp_path):
    store = RequestStore(tmp_path)
    failed = encode_results("token_stats", {}, MemoryError("rank 1 ran out"), _zero_counts())
    ex = ShardedExecutor(_RankZeroOfTwo(failed), cache=store, batch_tokens=40)
    model, reqs = ToyModel(), _stats_requests(12)
    with pytest.raises(RuntimeError, match=r"token_stats requests failed on rank 1: MemoryError: rank 1 ran out"):
        ex.serve([(model, r) for r in reqs])
    mine = ex.stats.by_rank[0]["sequences_forwarded"]
    assert 0 < mine < len(reqs) and store.count() == mine  # rank 0's own batches are cached


def test_a_failure_on_this_rank_is_reported_like_any_other_ranks(tmp_path, monkeypatch):
    def broken(self, requests):
        raise ValueError("bad batch")

    monkeypatch.setattr(ToyAdapter, "run_batch", broken)
    ex = ShardedExecutor(_RankZeroOfTwo(encode_results("token_stats", {}, None, _zero_counts())), batch_tokens=40)
    with pytest.raises(RuntimeError, match=r"failed on rank 0: ValueError: bad batch"):
        ex.serve([(ToyModel(), r) for r in _stats_requests(12)])
