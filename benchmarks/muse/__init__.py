"""MUSE (Shi et al. 2024) as open-unlearning evaluates it, as a benchmark plugin.

:mod:`.benchmark` is the plugin (``evaldag run muse``), :mod:`.config` its typed config,
:mod:`.spec` the graph and :mod:`.data` the verbmem / knowmem / privleak splits and the
retain model's logs (re-exported here).
"""

from .data import fewshot_pairs, load_eval_logs, load_muse, load_muse_split

__all__ = ["fewshot_pairs", "load_eval_logs", "load_muse", "load_muse_split"]
