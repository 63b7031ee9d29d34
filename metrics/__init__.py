"""evaldag's metric library, grouped by what the metrics measure.

One way in for every family: a module declares its metrics with ``@metric`` /
``@provider`` (a fairness metric with ``fairness_metric``, which is the same
declaration plus its registry entry), and importing the module registers them.
``register_builtin`` (the package's own ``evaldag.metrics`` entry point, which the
engine calls the first time it looks a metric up) imports every module of every
subpackage, so a new module is found without being listed anywhere.
"""

import importlib
import pkgutil


def register_builtin() -> None:
    """Import every module under ``evaldag.metrics``: each registers what it declares."""
    for mod in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        importlib.import_module(mod.name)
