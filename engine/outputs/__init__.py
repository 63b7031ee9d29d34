"""What a run writes: ``<GROUP>_EVAL.json``, ``<GROUP>_SUMMARY.json``, ``run.json`` as one set
(files.py) and the plain-text summary printed to the terminal (terminal.py)."""

from .files import add_file, add_to_run_json, add_to_summary, jsonable, node_names, publish, read_json, run_json, staged, write
from .sets import Interrupted, NotOurs, check_names
from .terminal import fmt, print_failures, print_run

__all__ = ["Interrupted", "add_file", "add_to_run_json", "add_to_summary", "NotOurs", "check_names", "fmt", "jsonable", "node_names", "print_failures", "print_run", "publish", "read_json", "run_json", "staged", "write"]
