"""The command lines behind the golden outputs (shared by the test and the script that makes them)."""

from __future__ import annotations

from pathlib import Path

FIX = Path(__file__).parent / "fixtures"
TINY = FIX / "tiny-llama"

RUNS: dict[str, list[str]] = {
    # every TOFU metric, the retain model through the graph, the Reference attack
    "tofu_target": ["run", "tofu", "--model", str(TINY / "target"), "--data", str(FIX / "tofu_tiny"),
                    "--metrics", "all", "--retain-model", str(TINY / "retain"), "--reference-model", str(TINY / "retain")],
    # MUSE with open-unlearning's retain logs
    "muse_target": ["run", "muse", "--model", str(TINY / "target"), "--data", str(FIX / "muse_tiny"),
                    "--metrics", "default,exact_memorization,mia", "--reference-model", str(TINY / "retain"),
                    "--retain-logs", str(FIX / "open_unlearning" / "retain_MUSE_EVAL.json")],
    # WEAT on the WEFE fixture vectors, every metric each query takes
    "weat": ["run", "weat", "--embeddings", str(FIX / "wefe" / "wefe_subset.npz")],
}


def run_one(name: str, tmp: Path) -> Path:
    """Run one golden command line into ``tmp/name`` with its own cache; returns the out folder."""
    from evaldag.engine import cli

    out = tmp / name
    argv = [*RUNS[name], "--quiet", "--out", str(out), "--cache-dir", str(tmp / f"cache-{name}")]
    code = cli.main(argv)
    if code != 0:
        raise AssertionError(f"{name}: evaldag exited {code}")
    return out
