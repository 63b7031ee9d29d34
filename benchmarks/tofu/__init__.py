"""TOFU (Maini et al. 2024) as open-unlearning evaluates it: data loading for now.

The benchmark graph (metric declarations) is added on top of ``evaldag.metrics``;
:mod:`.data` loads the subsets, prompt templates and retain-model logs it reads.
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
