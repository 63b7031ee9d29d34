"""``--fallback`` with other weights behind a real server (``transformers serve`` holding the
TOFU fixture's target, on 127.0.0.1; it gives no log-probs, so every token statistic goes to
the fallback). One row per case:

* the retain model as fallback: refused in one line naming both, nothing written;
* the same, after an ``hf:`` run of the retain model filled the cache (every node the fallback
  would serve is already stored under the retain model's key: the check must not depend on
  anything being computed);
* the same weights as fallback: hf:'s numbers, each named with the backend that served it.

Skipped (a note) where ``$EVALDAG_SERVE_BIN`` (default ``.venv-serve/bin/transformers``) is missing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[3]))  # tests.servers
METRICS = "forget_Q_A_Prob,retain_Q_A_Prob,forget_Q_A_ROUGE"


def _argv(model: str, out: Path, cache: Path, *more: str) -> list[str]:
    data = HERE.parents[2] / "fixtures" / "tofu_tiny"
    return [str(Path(sys.executable).with_name("evaldag")), "run", "tofu", "--model", model, "--data", str(data),
            "--metrics", METRICS, "--max-new-tokens", "8", "--quiet", "--out", str(out), "--cache-dir", str(cache), *more]


def _values(out: Path) -> dict | None:
    try:
        return {k: v["agg_value"] for k, v in json.loads((out / "TOFU_EVAL.json").read_text()).items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def run(c) -> None:
    import pytest

    from tests.servers import REPO, start_transformers_serve

    exe = Path(os.environ.get("EVALDAG_SERVE_BIN") or REPO / ".venv-serve/bin/transformers")
    if not exe.exists():
        c.notes.append(f"fallback: no transformers serve at {exe}; rows skipped")
        return
    from tests.perf.fault_campaign import evaldag

    tiny = REPO / "tests" / "fixtures" / "tiny-llama"
    d = c.trial_dir()
    try:
        srv = start_transformers_serve(tiny / "target", d)
    except pytest.skip.Exception as e:
        c.notes.append(f"fallback: transformers serve did not start: {e}")
        return
    try:
        server = ["--tokenizer", str(tiny / "target")]
        url = f"openai:{srv.url}/v1"
        want_dir = c.trial_dir()
        evaldag(_argv(f"hf:{tiny / 'target'}", want_dir / "out", want_dir / "cache"))
        want = _values(want_dir / "out")

        t = c.trial_dir()
        proc = evaldag(_argv(url, t / "out", t / "cache", *server, "--fallback", f"hf:{tiny / 'retain'}"))
        c._refused("fallback: the retain model behind a text-only server", proc, t / "out", [str(tiny / "retain"), url])

        t = c.trial_dir()
        evaldag(_argv(f"hf:{tiny / 'retain'}", t / "warm", t / "cache"))  # the retain model's nodes, stored
        proc = evaldag(_argv(url, t / "out", t / "cache", *server, "--fallback", f"hf:{tiny / 'retain'}"))
        c._refused("fallback: the retain model, its nodes already cached", proc, t / "out", [str(tiny / "retain"), url])

        t = c.trial_dir()
        proc = evaldag(_argv(url, t / "out", t / "cache", *server, "--fallback", f"hf:{tiny / 'target'}"))
        got = _values(t / "out")
        named = got is not None and all("served_by" in v for v in json.loads((t / "out" / "TOFU_EVAL.json").read_text()).values())
        close = got is not None and want is not None and got.keys() == want.keys() and all(
            abs(got[k] - want[k]) <= 1e-6 for k in want)
        c.classify("fallback: the same weights behind a text-only server", proc, "right" if close and named else "wrong",
                   "right", "" if named else "numbers do not name their backend")
    finally:
        srv.stop()
