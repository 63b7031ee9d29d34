"""``--add-metric FILE.py``: only Results reach the files, and every added metric is in the table."""

import json
from pathlib import Path

from ..inprocess import run_cli

FIX = Path(__file__).parents[1] / "fixtures"
FILE = '''
import numpy as np
from evaldag.engine import Params, Result, TokenStats, metric, pack_token_stats, unpack_token_stats


class AnswerParams(Params):
    field: str = "answer"


@metric("t39_answer_stats", version="1", params=AnswerParams, needs=("model", "data"))
def answer_stats(model, data, params):
    enc = model.encoder()
    results = yield [TokenStats(tuple(enc.encode(r["question"])),
                                tuple(enc.encode(r[params.field], add_special_tokens=False))) for r in data]
    return pack_token_stats(results)


@metric("t39_mean_nll", version="1", parents={"stats": "t39_answer_stats"})
def mean_nll(stats):
    per_item = [float(-s.logprob.mean()) for s in unpack_token_stats(stats)]
    return Result(float(np.mean(per_item)), {str(i): {"nll": x} for i, x in enumerate(per_item)})
'''


def test_a_scorers_arrays_stay_out_of_the_files_and_the_metric_is_in_the_table(tmp_path):
    f = tmp_path / "my_metrics.py"
    f.write_text(FILE)
    out = tmp_path / "out"
    r = run_cli(["run", "tofu", "--model", FIX / "tiny-llama" / "target", "--data", FIX / "tofu_tiny", "--limit", "3",
                 "--metrics", "forget_Q_A_Prob", "--add-metric", f, "--out", out, "--cache-dir", tmp_path / "c"])
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "RUN_SUMMARY.json").read_text())
    evals = json.loads((out / "RUN_EVAL.json").read_text())
    assert list(summary) == ["t39_mean_nll"] and list(evals) == ["t39_mean_nll"]
    assert (out / "RUN_SUMMARY.json").stat().st_size < 200  # no argmax/logprob/mu/var arrays
    lines = r.stdout.splitlines()
    at = lines.index("== RUN")
    assert lines[at + 1].split()[:2] == ["t39_mean_nll", f"{summary['t39_mean_nll']:.4g}"]
    assert not any("t39_answer_stats" in x for x in lines)


TEMPLATED = '''
import numpy as np
from evaldag.engine import Result, TokenStats, metric


@metric("t39_templated_prob", version="1", needs=("model", "data", "template"))
def templated_prob(model, data, template):
    """forget_Q_A_Prob's computation, written by a user: the run's template encodes each row."""
    enc = model.encoder()
    items = [enc.encode_qa(r["question"], r["answer"], template) for r in data]
    stats = yield [TokenStats(e.context_ids, e.continuation_ids) for e in items]
    return Result(float(np.mean([np.exp(s.logprob.mean()) for s in stats])))
'''


def test_an_added_scorer_encodes_with_the_runs_template(tmp_path):
    """With --template chat, a user's scorer that reads the ``template`` resource scores exactly
    what the built-in forget_Q_A_Prob scores (the same requests: nothing forwarded twice)."""
    f = tmp_path / "templated.py"
    f.write_text(TEMPLATED)
    out = tmp_path / "out"
    r = run_cli(["run", "tofu", "--model", FIX / "tiny-llama" / "target", "--data", FIX / "tofu_tiny", "--limit", "4",
                 "--template", "chat", "--metrics", "forget_Q_A_Prob", "--add-metric", f, "--out", out,
                 "--cache-dir", tmp_path / "c"])
    assert r.returncode == 0, r.stderr
    mine = json.loads((out / "RUN_SUMMARY.json").read_text())["t39_templated_prob"]
    builtin = json.loads((out / "TOFU_SUMMARY.json").read_text())["forget_Q_A_Prob"]
    assert abs(mine - builtin) < 1e-6, (mine, builtin)
    ex = json.loads((out / "run.json").read_text())["executor"]
    assert ex["requests"] == 8 and ex["unique"] == 4  # the same 4 requests, asked by both
