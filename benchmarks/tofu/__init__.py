"""TOFU (Maini et al. 2024) as open-unlearning evaluates it, as a benchmark plugin.

:mod:`.benchmark` is the plugin (``evaldag run tofu``; ``TofuBenchmark().build(TofuConfig(...))``
from Python), :mod:`.config` its typed config, :mod:`.spec` the graph, :mod:`.data` the
subsets and prompt templates and :mod:`.eval_logs` the retain-model logs it reads (re-exported here).
"""

from .data import DataError, load_subset, load_template_args, load_tofu, tofu_splits
from .eval_logs import EvalLogs, load_eval_logs

__all__ = ["DataError", "EvalLogs", "load_eval_logs", "load_subset", "load_template_args", "load_tofu", "tofu_splits"]
