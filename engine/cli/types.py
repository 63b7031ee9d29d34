"""Argparse ``type`` functions: a bad value is argparse's one-line error naming the flag.

The CLI owns them; plugins use them for their own flags (``--max-new-tokens``, WEAT's
``--lost-vocabulary-threshold``), so every command line refuses a bad number the same way.
"""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer > 0 (the flag and the value are named in the error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a whole number > 0, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"wants a whole number > 0, not {text!r}")
    return value


def fraction(text: str) -> float:
    """An argparse ``type``: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a number between 0 and 1, not {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"wants a number between 0 and 1, not {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (seconds)."""
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not x > 0 or x != x or x == float("inf"):
        raise argparse.ArgumentTypeError(f"wants a positive number of seconds, got {text!r}")
    return x


def limit(text: str) -> float:
    """An argparse ``type`` for ``--limit``: a whole number of rows (or documents), or a fraction
    below 1 of each split (or task), as lm-evaluation-harness's ``--limit`` reads it."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf") or (value >= 1 and not value.is_integer()):
        raise argparse.ArgumentTypeError(f"wants a whole number of rows or a fraction below 1, not {text!r}")
    return value
