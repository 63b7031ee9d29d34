"""EvaldagCallback on weights sharded over 2 gloo ranks (FSDP and FSDP2 on CPU, and a DeepSpeed
ZeRO-3 Trainer): every rank takes part in every forward pass (distributed/lockstep.py), the
numbers equal cold CLI runs on the saved checkpoints bit for bit, the saved checkpoints are then
found cached, and a metric a sharded model cannot serve is refused before training in one line."""

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from evaldag.engine import cli  # noqa: E402

TESTS = Path(__file__).parents[1]
sys.path.insert(0, str(TESTS))
from tiny_trainer import TINY, TOFU  # noqa: E402

from .. import ranks  # noqa: E402
from ..servers import free_port  # noqa: E402

METRICS = "forget_Q_A_Prob,forget_Q_A_ROUGE,forget_quality"
ARGS = ["run", "tofu", "--data", str(TOFU), "--retain-model", str(TINY / "retain"), "--metrics", METRICS,
        "--max-new-tokens", "8", "--quiet"]


def _two_ranks(tmp: Path, kind: str, metrics: str, cache: Path, script: str = "fsdp_worker.py") -> tuple[list[int], list[dict], str]:
    """(exit codes, each rank's last stdout line as JSON, each rank's stderr tail for a message)."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "OMP_NUM_THREADS": "1", "EVALDAG_DIST_TIMEOUT": "120", "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, str(TESTS / script), str(tmp / "out"), str(cache), kind, metrics]
    done = ranks.ranks([argv, argv], env, tmp / "logs", limit_s=300)
    lines = [json.loads(d.out.strip().splitlines()[-1]) if d.out.strip() else {} for d in done]
    return [d.code for d in done], lines, ranks.tails(done)


@pytest.fixture(scope="module")
def sharded_job(tmp_path_factory):
    """One 2-rank job training FSDP2 then FSDP (each 3 steps, evaluated and saved at each)."""
    tmp = tmp_path_factory.mktemp("fsdp")
    codes, lines, errs = _two_ranks(tmp, "fsdp2,fsdp", METRICS, tmp / "cache")
    assert codes == [0, 0], errs
    assert [x["sum"] for x in lines] == [2.0, 2.0]  # the training job's group is still up after both
    return tmp, lines


@pytest.mark.parametrize("kind", ["fsdp2", "fsdp"])
def test_sharded_weights_are_evaluated_in_step_and_equal_the_saved_checkpoints(kind, sharded_job, tmp_path):
    job, lines = sharded_job
    per_rank = [x["kinds"][kind] for x in lines]
    assert [r["sharded"] for r in per_rank] == [kind, kind]
    assert per_rank[0]["history"] == per_rank[1]["history"] and per_rank[0]["fingerprint"] == per_rank[1]["fingerprint"]
    hist = per_rank[0]["history"]
    assert [h["step"] for h in hist] == [1, 2, 3] and all(h["exit"] == 0 for h in hist)
    probs = [h["summary"]["forget_Q_A_Prob"] for h in hist]
    assert probs[0] > probs[1] > probs[2]  # gradient ascent: each step evaluated on that step's weights
    if kind == "fsdp2":  # a metric sharded weights cannot serve: refused when the callback starts
        assert per_rank[0]["refused"] == per_rank[1]["refused"] == (
            "EvaldagCallback: grad_norms needs gradients; hf:in-memory (fsdp2: weights sharded over 2 ranks) gives "
            "token statistics with the chosen token's log-prob and the greedy token (argmax) and full-vocabulary "
            "log-prob statistics, generation, hidden states: drop it, or evaluate the saved checkpoints with the CLI")
        assert not list((job / "out" / kind / "bad" / "evaldag").glob("step-*"))  # nothing evaluated

    out = job / "out" / kind
    run = json.loads((out / "evaldag" / "step-1" / "run.json").read_text())
    by_rank = run["executor"]["by_rank"]
    assert run["executor"]["world_size"] == 2 and all(r["batches"] > 0 for r in by_rank.values())
    # the ranks had unequal shares; the one that finished first answered the other's passes
    assert sum(r["filler_passes"] for r in by_rank.values()) > 0

    # a sharded model forwards every sequence whole (no shared prefixes): so does the one-process run it is held to
    for step in (1, 3):  # a cold one-process CLI run on the saved whole model: the same numbers, bit for bit
        mine = out / "evaldag" / f"step-{step}" / "TOFU_EVAL.json"
        if kind == "fsdp2":
            cold = tmp_path / f"cold{step}"
            assert cli.main([*ARGS, "--model", str(out / f"checkpoint-{step}"), "--cache-dir", str(tmp_path / "c"),
                             "--prefix-sharing", "off", "--out", str(cold)]) == 0
            assert (cold / "TOFU_EVAL.json").read_bytes() == mine.read_bytes()
        else:  # FSDP trained the same steps: its evaluations are FSDP2's, and so the cold runs', bit for bit
            assert mine.read_bytes() == (job / "out" / "fsdp2" / "evaldag" / f"step-{step}" / "TOFU_EVAL.json").read_bytes()

    # the callback recorded each saved folder as the weights it evaluated: a CLI run there is all cached
    warm = tmp_path / "warm"
    assert cli.main([*ARGS, "--model", str(out / "checkpoint-2"), "--cache-dir", str(job / "cache"), "--out", str(warm)]) == 0
    ex = json.loads((warm / "run.json").read_text())["executor"]
    assert ex["sequences_forwarded"] == 0 and ex["models_loaded"] == []
    assert json.loads((warm / "TOFU_SUMMARY.json").read_text())["forget_Q_A_Prob"] == probs[1]


def test_a_deepspeed_zero3_trainer_is_evaluated_in_step_and_equals_its_saved_checkpoints(tmp_path):
    """A real Trainer with a ZeRO stage-3 config (every parameter partitioned) on 2 CPU ranks."""
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("deepspeed missing in CI (.ci/run installs it for this test)", pytrace=False)
        pytest.skip("deepspeed not installed (pip install deepspeed): a training job's package, not evaldag's")
    codes, lines, errs = _two_ranks(tmp_path, "-", "-", tmp_path / "cache", script="zero3_trainer.py")
    assert codes == [0, 0], errs
    assert [(x["sharded"], x["partitioned"], x["engine"]) for x in lines] == [("zero3", True, "DeepSpeedEngine")] * 2
    assert lines[0]["history"] == lines[1]["history"] and lines[0]["fingerprint"] == lines[1]["fingerprint"]
    hist = lines[0]["history"]
    assert [(h["step"], h["exit"]) for h in hist] == [(2, 0), (4, 0)]
    assert hist[0]["summary"]["forget_Q_A_Prob"] > hist[1]["summary"]["forget_Q_A_Prob"]
    out = tmp_path / "out"
    by_rank = json.loads((out / "evaldag" / "step-2" / "run.json").read_text())["executor"]["by_rank"]
    assert sum(r["filler_passes"] for r in by_rank.values()) > 0
    cold = tmp_path / "cold"  # the retain model was loaded whole inside the ZeRO-3 job: same numbers as here
    assert cli.main([*ARGS, "--model", str(out / "checkpoint-4"), "--cache-dir", str(tmp_path / "c"), "--prefix-sharing", "off",
                     "--out", str(cold)]) == 0
    assert (cold / "TOFU_EVAL.json").read_bytes() == (out / "evaldag" / "step-4" / "TOFU_EVAL.json").read_bytes()
    warm = tmp_path / "warm"
    assert cli.main([*ARGS, "--model", str(out / "checkpoint-2"), "--cache-dir", str(tmp_path / "cache"), "--prefix-sharing", "off",
                     "--out", str(warm)]) == 0
    assert json.loads((warm / "run.json").read_text())["executor"]["sequences_forwarded"] == 0
    assert (warm / "TOFU_EVAL.json").read_bytes() == (out / "evaldag" / "step-2" / "TOFU_EVAL.json").read_bytes()
