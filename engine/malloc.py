"""Keep freed memory inside the process while a model works on the CPU (glibc only).

Why: a CPU forward allocates and frees tensors of tens of megabytes many times a second (a
chunk of vocabulary statistics is 256 rows x 49,152 float32 = 50 MB; GradNorm's logits and
their gradient more). glibc serves every allocation above its mmap threshold (32 MB at most)
with a fresh ``mmap`` and hands it back on ``free``, so the kernel faults in and zeroes each
such tensor's pages again. On SmolLM2-135M's 40-row TOFU run that was 10.6 s of system time
of 167 CPU s; with malloc's own mmap off and the heap's top trimmed only above 2 GiB the
freed blocks are reused: 2.4 s of system time, user time unchanged, peak memory +0.3 GB
(docs/performance.md, "Memory reuse on the CPU").

:func:`keep_freed_memory` is called once per process when a model is loaded on the CPU
(``HFAdapter``), never at import. ``EVALDAG_MALLOC=system`` keeps glibc's defaults. Where
the C library is not glibc (macOS, musl) nothing is done. run.json's ``executor.malloc``
says which way the run went.
"""

from __future__ import annotations

import ctypes
import os

# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
TRIM_BYTES = 2 << 30  # free memory at the heap's top given back to the system only beyond this
TOP_PAD_BYTES = 64 << 20  # extra the heap grows by each time, so growing is rare
ENV = "EVALDAG_MALLOC"

_state: str | None = None  # None until asked; then what was done, for run.json


def keep_freed_memory() -> str:
    """Tune glibc's malloc once for this process (see the module doc); returns what was done."""
    global _state
    if _state is not None:
        return _state
    if os.environ.get(ENV, "").strip().lower() == "system":
        _state = f"system: {ENV}=system"
        return _state
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only: mallopt's parameters differ elsewhere
    except (OSError, AttributeError):
        _state = "system: not glibc"
        return _state
    ok = all(libc.mallopt(p, v) == 1 for p, v in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_BYTES),
                                                  (M_TOP_PAD, TOP_PAD_BYTES)))
    _state = "kept: no mmap for malloc, trim above 2 GiB" if ok else "system: mallopt refused"
    return _state


def state() -> str | None:
    """What :func:`keep_freed_memory` did in this process (None: no CPU model was loaded)."""
    return _state
