"""TOFU (Maini et al. 2024) as open-unlearning evaluates it, as a benchmark plugin.

:mod:`.benchmark` is the plugin (``evaldag run tofu``; ``TofuBenchmark().build(TofuConfig(...))``
from Python), :mod:`.config` its typed config, :mod:`.spec` the graph and :mod:`.data` the
subsets. What it shares with MUSE (row readers, the retain-model logs) lives in
``benchmarks/unlearning/`` and the template args in ``benchmarks/template_args.py``; the
names a user imports from here are re-exported.
"""

from ..template_args import load_template_args
from ..unlearning.eval_logs import EvalLogs, load_eval_logs
from .data import DataError, load_subset, load_tofu, tofu_splits

__all__ = ["DataError", "EvalLogs", "load_eval_logs", "load_subset", "load_template_args", "load_tofu", "tofu_splits"]
