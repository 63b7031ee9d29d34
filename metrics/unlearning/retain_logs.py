"""Values read from reference logs instead of computed: the retain side of an unlearning run.

Forget quality and privleak compare the model with a retain model. When that model's
results already exist (open-unlearning's ``retain_logs_path``, or an evaldag
``*_EVAL.json``), the benchmark binds the file as ``retain_logs`` and reads each entry
with this metric instead of running the retain model.
"""

from __future__ import annotations

from ...engine import Params, Result, metric


class LogKey(Params):
    key: str


@metric("from_logs", version="1", params=LogKey, needs=("retain_logs",))
def from_logs(retain_logs: dict, params: LogKey) -> Result:
    """One metric's entry read from reference logs (an open-unlearning or evaldag EVAL.json)."""
    if params.key not in retain_logs:
        return Result(None, reason=f"the retain logs have no {params.key!r} entry")
    entry = retain_logs[params.key]
    if not isinstance(entry, dict):  # the benchmarks check the keys they read up front; a Python caller may not
        return Result(None, reason=f"the retain logs' {params.key!r} entry is a {type(entry).__name__}, not an object")
    return Result.from_dict(entry)
