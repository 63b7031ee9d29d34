"""``--metrics`` words: names, groups, ``default``/``all``, and exclusions (``all,-X``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaldag.benchmarks.muse.benchmark import MuseBenchmark
from evaldag.benchmarks.tofu.benchmark import TofuBenchmark
from evaldag.engine.menu import MetricMenu

FIX = Path(__file__).parents[1] / "fixtures"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))
MENU = MetricMenu(default=("a", "b"), all=("a", "b", "c", "d"), groups={"g": ("c", "d")})


@pytest.mark.parametrize("text, names", [
    ("all,-c", ("a", "b", "d")),
    ("-a", ("b",)),                # a list that starts with an exclusion starts from the default
    ("all,-g", ("a", "b")),        # a group excluded
    ("g,a,-d", ("c", "a")),
    ("all,-default", ("c", "d")),
    ("c,-c,c", ("c",)),            # left to right
])
def test_exclusions(text, names):
    assert MENU.parse(text) == names


def test_exclusions_that_leave_nothing_or_name_nothing():
    with pytest.raises(ValueError, match="--metrics 'all,-all' leaves no TOFU metric to run"):
        MENU.parse("all,-all", bench="TOFU")
    with pytest.raises(ValueError, match="unknown TOFU metric 'x'"):
        MENU.parse("all,-x", bench="TOFU")
    assert MENU.knows("-c") and MENU.knows(" - g") and not MENU.knows("-x")


def test_token_stats_group_is_what_asks_only_for_token_statistics():
    tofu = TofuBenchmark().metric_menu().groups["token_stats"]
    assert {"forget_Q_A_Prob", "forget_truth_ratio", "forget_quality", "privleak", "mia_min_k", "ra_Q_A_Prob_normalised"} <= set(tofu)
    assert not {"mia_gradnorm", "forget_Q_A_ROUGE", "model_utility", "forget_Q_A_gibberish"} & set(tofu)
    assert len(tofu) == 25
    muse = MuseBenchmark().metric_menu().groups["token_stats"]
    assert set(muse) == {"exact_memorization", "extraction_strength", "mia_loss", "mia_min_k", "mia_min_k_plus_plus",
                         "mia_reference", "mia_zlib", "privleak"}


def test_run_with_an_exclusion_and_the_group(tmp_path):
    out = tmp_path / "out"
    cmd = [EVALDAG, "run", "tofu", "--model", str(FIX / "tiny-llama" / "target"), "--data", str(FIX / "tofu_tiny"),
           "--metrics=token_stats,-mia_reference,-mia,-privleak,-forget_quality,-retain_Truth_Ratio",
           "--quiet", "--out", str(out), "--cache-dir", str(tmp_path / "c")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    evals = json.loads((out / "TOFU_EVAL.json").read_text())
    want = set(TofuBenchmark().metric_menu().groups["token_stats"]) - set(TofuBenchmark.mia_metrics) \
        - {"privleak", "forget_quality", "retain_Truth_Ratio"}
    assert set(evals) == want and len(want) == 17
