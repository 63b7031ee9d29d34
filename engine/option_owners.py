"""One owner per option: benchmarks of one run that declare the same option share one meaning.

Several benchmarks of one command add their options to one parser. An option two of them
need (``--data``, ``--seed``, ``--limit``) is declared through :func:`add_shared` by each:
the first declaration stands and a later one must mean the same -- the same action, dest,
type, default, choices, nargs and const; its help may say it in its own words -- or the
command fails at start-up naming both benchmarks (:class:`OptionClash`). A plain
``add_argument`` of an option another benchmark (or ``evaldag run`` itself) declared fails
the same way. argparse's ``conflict_handler="resolve"``, where the last declaration
silently won, is not used.
"""

from __future__ import annotations

import argparse
from typing import Any, Iterable

RUN = "evaldag run"  # the owner of the options the command itself declares


class OptionClash(ValueError):
    """Two declarations of one option with different meanings; one line for ``evaldag: error:``."""

    def __init__(self, message: str, option: str = "", action: argparse.Action | None = None):
        super().__init__(message)
        self.option, self.action = option, action


def meaning(action: argparse.Action) -> tuple:
    """What a declaration does with what it parses (not how its help says it)."""
    extra = tuple(sorted((k, v) for k, v in vars(action).items() if k in ("role", "key")))  # an alias's pair
    return (type(action), frozenset(action.option_strings), action.dest, action.nargs, action.const, action.default,
            action.type, tuple(action.choices) if action.choices is not None else None, action.required, extra)


def add_shared(p: Any, *names: str, **kw: Any) -> argparse.Action:
    """``p.add_argument(*names, **kw)``, or the declaration already there when it means the same."""
    try:
        return p.add_argument(*names, **kw)
    except argparse.ArgumentError:
        existing = next(p._option_string_actions[n] for n in names if n in p._option_string_actions)
        mine = argparse.ArgumentParser(add_help=False).add_argument(*names, **kw)
        if meaning(mine) != meaning(existing):
            raise OptionClash(f"{names[0]} is declared twice with different meanings", names[0], existing) from None
        return existing


def declare(parser: argparse.ArgumentParser, benches: Iterable[Any]) -> None:
    """Each benchmark's options on ``parser``, each option owned by the first that declared it;
    a second declaration with another meaning is an :class:`OptionClash` naming both."""
    owners = {id(a): RUN for a in parser._actions}
    for b in benches:
        try:
            b.add_arguments(parser)
        except OptionClash as e:
            raise OptionClash(_clash(e.option, owners.get(id(e.action), RUN), b.name)) from None
        except argparse.ArgumentError as e:  # a plain add_argument of an option declared before
            names = [n for n in str(e.argument_name or "").split("/") if n in parser._option_string_actions]
            first = owners.get(id(parser._option_string_actions[names[0]]), RUN) if names else RUN
            raise OptionClash(_clash(names[0] if names else str(e.argument_name), first, b.name)) from None
        for a in parser._actions:
            owners.setdefault(id(a), b.name)


def _clash(option: str, first: str, second: str) -> str:
    return (f"{option} is declared by {first} and by {second} with different meanings; run them apart "
            f"(one evaldag run each), or give {option} one shared declaration")
