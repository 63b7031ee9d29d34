"""``evaldag run BENCH --model A --model B ...``: a sweep of checkpoints in one process (group).

Each checkpoint runs the same graph in turn, on one cache, into ``OUT/<name>/``; one
``OUT/report.html`` compares them, a column per checkpoint. ``--model`` takes folders or
hub ids, globs (``'ckpts/step-*'``) and ``@FILE`` (one checkpoint per line). A spec with
a scheme (``openai:http://h/v1?x=[1]``, ``hf:./ckpt*``) is one model, never globbed or read
as a file.

Models are loaded one at a time: each checkpoint gets a fresh executor, so the previous
checkpoint's weights are freed before the next loads. The retain and reference models
are forwarded once for the whole sweep: their nodes and requests are cached by
fingerprint during the first checkpoint, so later checkpoints read them and do not even
load those models. Under torchrun, every checkpoint's requests are spread over all ranks.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from ..adapters.spec import has_scheme


def expand_models(values: list[str] | None) -> list[str]:
    """The checkpoints named by ``--model`` values, in order, each once."""
    out: list[str] = []
    for v in values or []:
        if has_scheme(v):
            out.append(v)
        elif v.startswith("@"):
            lines = (x.strip() for x in Path(v[1:]).read_text().splitlines())
            out += [x for x in lines if x and not x.startswith("#")]
        elif any(c in v for c in "*?["):
            hits = sorted(glob.glob(v), key=_natural)  # step-2 before step-10
            if not hits:
                raise FileNotFoundError(f"--model {v!r} matches no checkpoint")
            out += hits
        else:
            out.append(v)
    return list(dict.fromkeys(out))


def folder_names(models: list[str]) -> list[str]:
    """An output folder name per checkpoint: its last path part, longer where two would clash."""
    parts = [Path(m.rstrip("/")).parts or (m,) for m in models]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = [re.sub(r"[^\w.+-]+", "-", "-".join(p[-depth:])).strip("-") or "model" for p in parts]
        if len(set(names)) == len(names):
            return names
    return [f"{i:02d}-{Path(m).name}" for i, m in enumerate(models)]


def _natural(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]
