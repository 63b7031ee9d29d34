"""TOFU (Maini et al. 2024) as open-unlearning evaluates it, as a benchmark plugin.

:mod:`.benchmark` is the plugin (``evaldag run tofu``; ``TofuBenchmark().build(TofuConfig(...))``
from Python), :mod:`.config` its typed config, :mod:`.spec` the graph and :mod:`.data` the
subsets, prompt templates and retain-model logs it reads (re-exported here).
"""

from .data import (
    DataError,
    EvalLogs,
    load_eval_logs,
    load_subset,
    load_template_args,
    load_tofu,
    tofu_splits,
)

__all__ = ["DataError", "EvalLogs", "load_eval_logs", "load_subset", "load_template_args", "load_tofu", "tofu_splits"]
