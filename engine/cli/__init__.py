"""The ``evaldag`` command line (entry point ``evaldag.engine.cli:main``); see :mod:`.main`."""

from .main import main

__all__ = ["main"]
