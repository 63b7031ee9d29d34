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

    ``--metrics`` also takes the words ``default``, ``all`` and each key of ``groups``.
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
        fold = (lambda s: s) if self.case_sensitive else str.lower
        return fold(word) in {fold(w) for w in self.words()}

    def parse(self, text: str | None, *, bench: str = "", strict: bool = True) -> tuple[str, ...]:
        """``"a,b,default,mia,all"`` -> metric names; an unknown name is an error when ``strict``.

        With several benchmarks in one run (``strict=False``) a name this benchmark does not
        know belongs to another one and is skipped here.
        """
        if not text:
            return self.default
        canon = {m if self.case_sensitive else m.lower(): m for m in self.all}
        names: list[str] = []
        for word in (x.strip() for x in text.split(",")):
            key = word if self.case_sensitive else word.lower()
            if key == "default":
                names += self.default
            elif key == "all":
                names += self.all
            elif key in self.groups:
                names += self.groups[key]
            elif key in canon:
                names.append(canon[key])
            elif word and strict:
                raise ValueError(f"unknown {bench} metric {word!r}; {did_you_mean(word, sorted(self.words()))}"
                                 f"known: {', '.join(sorted(self.all))}")
        return tuple(dict.fromkeys(names))


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """``"did you mean forget_quality? "`` for a near miss (a typo), else ``""``: said before the
    list of every name, which a user would otherwise scan for the one they meant."""
    close = difflib.get_close_matches(word, list(names), n=1)
    return f"did you mean {close[0]}? " if close else ""
