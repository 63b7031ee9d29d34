"""SIGTERM (a batch scheduler's cancel) stops a run within seconds inside any model stage.

The run's model work is slowed on purpose (a prelude patches the decode step or the backward
pass to sleep) so the signal lands inside generation or GradNorm; the run must stop with its
one line, exit 143, keep every node finished before, and leave no lock behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIX = Path(__file__).parents[1] / "fixtures"

SLOW = {
    "generation": ("from evaldag.engine.adapters import hf_generation as m\n"
                   "cls = m.DecodeLoop\nreal = cls._forward\n"
                   "def slow(self, *a, **k):\n    mark(); time.sleep(0.5); return real(self, *a, **k)\n"
                   "cls._forward = slow\n", "forget_Q_A_ROUGE"),
    "grad_norm": ("import torch\nreal = torch.Tensor.backward\n"
                  "def slow(self, *a, **k):\n    mark(); time.sleep(0.5); return real(self, *a, **k)\n"
                  "torch.Tensor.backward = slow\n", "mia_gradnorm"),
}


@pytest.mark.parametrize("stage", sorted(SLOW))
def test_sigterm_inside_a_long_stage(tmp_path, stage):
    patch, metric = SLOW[stage]
    marker = tmp_path / "inside"
    prelude = (f"import sys, time\nfrom pathlib import Path\n"
               f"def mark():\n    with open({str(marker)!r}, 'a') as f: f.write(repr(time.time()) + '\\n')\n" + patch)
    code = prelude + "from evaldag.engine.cli import main\nraise SystemExit(main(sys.argv[1:]))"
    out, cache = tmp_path / "out", tmp_path / "cache"
    cmd = [sys.executable, "-c", code, "run", "tofu", "--model", str(FIX / "tiny-llama" / "target"),
           "--data", str(FIX / "tofu_tiny"), "--metrics", f"forget_Q_A_Prob,{metric}", "--quiet",
           "--out", str(out), "--cache-dir", str(cache)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 240
    while not marker.exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert marker.exists(), p.communicate()[1][-2000:]
    time.sleep(0.3)
    sent = time.time()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    after = [float(t) for t in marker.read_text().split() if float(t) > sent]
    assert p.returncode == 143, err[-2000:]
    # stopped before any output: what it kept is in the cache, said as Ctrl-C says it (no "previous outputs")
    (line,) = err.strip().splitlines()
    m = re.fullmatch(r"evaldag: interrupted \(SIGTERM\): (\d+) nodes and (\d+) model results kept; rerun to resume", line)
    assert m and int(m[1]) >= 1 and int(m[2]) >= 40, line
    assert not out.exists()
    # at most the slowed step in flight and one more began after the signal (a step sleeps 0.5 s): counted,
    # not timed, so a loaded machine cannot fail it; without the stop the stage runs hundreds more
    assert len(after) <= 2, (len(after), marker.read_text().count("\n"))
    assert not list((cache / "locks").glob("*.lock")) if (cache / "locks").exists() else True
    # the cheap kinds of the stage were served first and stored at once: the forget answers'
    # token statistics (40 rows) are in the request store, for the next run to read
    info = subprocess.run([sys.executable, "-m", "evaldag.engine.cli", "cache", "info", "--cache-dir", str(cache)],
                          capture_output=True, text=True, check=True)
    assert json.loads(info.stdout)["requests"] >= 40, info.stdout
    runs = subprocess.run([sys.executable, "-m", "evaldag.engine.cli", "cache", "runs", "--cache-dir", str(cache)],
                          capture_output=True, text=True, check=True).stdout.strip().splitlines()
    assert len(runs) == 1 and "stopped by SIGTERM (what it computed is cached: the same command resumes)" in runs[0]
    assert f"out={out}" in runs[0] and f"model={FIX / 'tiny-llama' / 'target'}" in runs[0]


def test_a_second_run_does_not_wait_for_the_first_runs_generation(tmp_path):
    """The first run stores and unlocks its token-statistics node before its (slowed) generation:
    a second run needing only that node finishes while the first is still generating."""
    patch, _ = SLOW["generation"]
    marker = tmp_path / "inside"
    code = (f"import sys, time\nfrom pathlib import Path\ndef mark():\n    Path({str(marker)!r}).touch()\n" + patch
            + "from evaldag.engine.cli import main\nraise SystemExit(main(sys.argv[1:]))")
    cache = tmp_path / "cache"
    base = ["run", "tofu", "--model", str(FIX / "tiny-llama" / "target"), "--data", str(FIX / "tofu_tiny"), "--quiet",
            "--cache-dir", str(cache)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-c", code, *base, "--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE",
                              "--out", str(tmp_path / "a")], stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 240
        while not marker.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert marker.exists()
        second = subprocess.run([sys.executable, "-m", "evaldag.engine.cli", *base, "--metrics", "forget_Q_A_Prob",
                                 "--out", str(tmp_path / "b"), "--lock-timeout", "60"], capture_output=True, text=True, env=env)
        assert second.returncode == 0, second.stderr
        assert first.poll() is None  # still generating
        run = json.loads((tmp_path / "b" / "run.json").read_text())
        assert run["executor"]["sequences_forwarded"] == 0 and run["lock_wait_seconds"] < 5
    finally:
        first.kill()
        first.wait()


def test_the_waiting_line_says_what_the_holder_computes(tmp_path):
    from evaldag.engine.cache.nodes import NodeStore

    store = NodeStore(tmp_path)
    lk = store.try_lock("ab" * 32, doing="qa_generations[362165] on /models/target")
    try:
        other = NodeStore(tmp_path).lock("ab" * 32)
        assert other.holder().startswith(f"lock held by pid {os.getpid()} on ")
        assert ", computing qa_generations[362165] on /models/target" in other.holder()
    finally:
        lk.release()


def test_generations_finished_before_a_stop_are_kept(tmp_path):
    """One continuous generation batch, stopped after some rows finished: those rows are stored
    (the executor stores each as it finishes), and the next run generates only the others."""
    fin = tmp_path / "finished"
    prelude = ("import sys, time\nfrom pathlib import Path\nfrom evaldag.engine.adapters import hf_generation as m\n"
               "seen = []\nreal_finished = m.finished\n"
               "def counted(i, r):\n    real_finished(i, r); seen.append(i)\n"
               f"    Path({str(fin)!r}).write_text(str(len(seen)))\n"
               "m.finished = counted\ncls = m.DecodeLoop\nreal = cls._forward\n"
               "def slow(self, *a, **k):\n    time.sleep(0.05); return real(self, *a, **k)\n"
               "cls._forward = slow\n")
    code = prelude + "from evaldag.engine.cli import main\nraise SystemExit(main(sys.argv[1:]))"
    cache = tmp_path / "cache"
    base = ["run", "tofu", "--model", str(FIX / "tiny-llama" / "target"), "--data", str(FIX / "tofu_tiny"),
            "--metrics", "forget_Q_A_ROUGE", "--max-new-tokens", "48", "--quiet", "--cache-dir", str(cache)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-c", code, *base, "--out", str(tmp_path / "a")], stderr=subprocess.PIPE,
                         text=True, env=env)
    deadline = time.time() + 240
    while not (fin.exists() and int(fin.read_text() or 0) >= 3) and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err[-2000:]
    kept = int(fin.read_text())
    assert 3 <= kept < 40
    again = subprocess.run([sys.executable, "-m", "evaldag.engine.cli", *base, "--out", str(tmp_path / "b")],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr
    ex = json.loads((tmp_path / "b" / "run.json").read_text())["executor"]
    assert ex["by_kind"]["generate"]["cached"] >= kept and ex["generations"] == 40 - ex["by_kind"]["generate"]["cached"]
