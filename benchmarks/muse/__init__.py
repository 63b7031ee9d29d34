"""MUSE (Shi et al. 2024) as open-unlearning evaluates it: data loading for now.

:mod:`.data` loads the verbmem / knowmem / privleak splits and the retain model's logs;
the benchmark graph is declared on top of ``evaldag.metrics``.
"""

from .data import fewshot_pairs, load_eval_logs, load_muse, load_muse_split

__all__ = ["fewshot_pairs", "load_eval_logs", "load_muse", "load_muse_split"]
