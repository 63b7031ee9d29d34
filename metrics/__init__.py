"""evaldag's metric library, grouped by what the metrics measure.

Importing a submodule registers its metrics. ``register_builtin`` (the package's own
``evaldag.metrics`` entry point) imports them all, so ``evaldag list`` shows them.
"""

import importlib

BUILTIN_MODULES: tuple[str, ...] = (
    "unlearning.scoring", "unlearning.probability", "unlearning.truth_ratio", "unlearning.rouge",
    "unlearning.memorization", "unlearning.mia", "unlearning.forget_quality", "unlearning.privleak",
    "unlearning.utility", "unlearning.retain_logs",
    "fairness", "toy", "editing",
)


def register_builtin() -> None:
    for name in BUILTIN_MODULES:
        importlib.import_module(f"{__name__}.{name}")
