"""CPU runs keep freed memory for reuse (engine/malloc.py): a tensor of tens of MB made and
freed again is not faulted in from the kernel each time; EVALDAG_MALLOC=system keeps glibc's
defaults; run.json says which way a run that loaded a model went."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

_PROBE = """
import json, resource, sys, torch
from evaldag.engine import malloc
state = malloc.keep_freed_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(256, 49152)  # 50 MB, SmolLM2's vocabulary statistics chunk
    del x
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"state": state, "faults": faults}))
"""


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version
        return True
    except (OSError, AttributeError):
        return False


def _probe(way: str, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, way], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _glibc(), reason="mallopt's parameters are glibc's; elsewhere nothing is done")
def test_freed_tensors_are_reused_instead_of_faulted_in_again():
    pages = 256 * 49152 * 4 // 4096  # 12,288 pages a tensor
    system = _probe("system")
    kept = _probe("keep")
    assert kept["state"] == "kept: no mmap for malloc, trim above 2 GiB"
    assert min(system["faults"][2:]) > pages * 0.9  # glibc's default: every allocation faulted in afresh
    # kept: after the heap has grown once or twice, the same pages serve every later tensor
    assert sum(f < pages * 0.1 for f in kept["faults"]) >= 8, kept["faults"]
    assert _probe("keep", EVALDAG_MALLOC="system")["state"] == "system: EVALDAG_MALLOC=system"


def test_run_json_says_how_malloc_was_set_when_a_cpu_model_was_loaded(tmp_path):
    from .. import conftest_models as cm

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "evaldag.engine.cli", "run", "tofu", "--quiet", "--model", str(cm.TINY_LLAMA / "target"), "--data", str(cm.TOFU),
           "--metrics", "forget_Q_A_Prob", "--limit", "3", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")]
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    ex = json.loads((tmp_path / "out" / "run.json").read_text())["executor"]
    assert ex["malloc"] == ("kept: no mmap for malloc, trim above 2 GiB" if _glibc() else "system: not glibc")
    subprocess.run(cmd, check=True, env=env, capture_output=True)  # warm: no model loaded, nothing said
    assert "malloc" not in json.loads((tmp_path / "out" / "run.json").read_text())["executor"]
