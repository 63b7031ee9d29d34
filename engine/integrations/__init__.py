"""Evaluation inside other tools' loops: :class:`EvaldagCallback` for a transformers ``Trainer``.

Importing this package imports transformers (the callback subclasses ``TrainerCallback``);
``evaldag.engine`` itself does not import it.
"""

from .callback import EvaldagCallback

__all__ = ["EvaldagCallback"]
