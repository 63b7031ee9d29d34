"""``MetricMenu``: the metric names a benchmark accepts, and how ``--metrics`` text becomes them.

Its own module because the CLI (``evaldag list``, ``--metrics`` across several benchmarks)
and every plugin read it, and neither needs the plugin base class or the registry.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable


@dataclass(frozen=True)
class MetricMenu:
    """The metric names a benchmark accepts, exactly as ``--metrics`` takes them.

    ``--metrics`` also takes the words ``default``, ``all`` and each key of ``groups``, and
    ``-WORD`` to leave out what a word names (``all,-mia_gradnorm``).
    """

    default: tuple[str, ...]
    all: tuple[str, ...]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    case_sensitive: bool = True
    note: str = ""  # e.g. what the default means when it is not a fixed list

    def words(self) -> set[str]:
        """Every word ``--metrics`` accepts for this benchmark."""
        return {*self.all, "default", "all", *self.groups}

    def knows(self, word: str) -> bool:
        """Whether ``word`` (or, for an exclusion ``-word``, the word after the dash) is one of ours."""
        fold = (lambda s: s) if self.case_sensitive else str.lower
        return fold(word.strip().removeprefix("-").strip()) in {fold(w) for w in self.words()}

    def parse(self, text: str | None, *, bench: str = "", strict: bool = True) -> tuple[str, ...]:
        """``"a,b,default,mia,all"`` -> metric names; an unknown name is an error when ``strict``.

        A word with a leading ``-`` removes what it names from the words before it
        (``all,-mia_gradnorm``); a list that starts with an exclusion starts from ``default``.
        With several benchmarks in one run (``strict=False``) a name this benchmark does not
        know belongs to another one and is skipped here.
        """
        if not text:
            return self.default
        words = [x.strip() for x in text.split(",")]
        names: list[str] = list(self.default) if words[0].startswith("-") else []
        for word in words:
            drop = word.startswith("-")
            picked = self._expand(word[1:].strip() if drop else word, bench, strict)
            names = [n for n in names if n not in picked] if drop else names + picked
        if strict and not names:
            raise ValueError(f"--metrics {text!r} leaves no {(bench + ' ') if bench else ''}metric to run")
        return tuple(dict.fromkeys(names))

    def _expand(self, word: str, bench: str, strict: bool) -> list[str]:
        """The names one word stands for: itself, or every name of ``default``, ``all`` or a group."""
        key = word if self.case_sensitive else word.lower()
        canon = {m if self.case_sensitive else m.lower(): m for m in self.all}
        if key == "default":
            return list(self.default)
        if key == "all":
            return list(self.all)
        if key in self.groups:
            return list(self.groups[key])
        if key in canon:
            return [canon[key]]
        if word and strict:
            raise ValueError(f"unknown {bench} metric {word!r}; {did_you_mean(word, sorted(self.words()))}"
                             f"known: {', '.join(sorted(self.all))}")
        return []


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """``"did you mean forget_quality? "`` for a near miss (a typo), else ``""``: said before the
    list of every name, which a user would otherwise scan for the one they meant."""
    close = difflib.get_close_matches(word, list(names), n=1)
    return f"did you mean {close[0]}? " if close else ""
