"""What a run writes: ``<GROUP>_EVAL.json``, ``<GROUP>_SUMMARY.json``, ``run.json`` (files.py)
and the plain-text summary printed to the terminal (terminal.py)."""

from .files import jsonable, node_names, read_json, run_json, write
from .terminal import fmt, print_run

__all__ = ["fmt", "jsonable", "node_names", "print_run", "read_json", "run_json", "write"]
