"""One registry type for the engine's name -> thing tables, and the display hook.

Why a type of its own: the engine keeps several tables a plugin or a higher layer fills
(request kinds and their result types, the notebook displays of the engine's objects), and
each grew its own dict, its own "unknown name" message and its own rule for a second
registration. :class:`NameTable` is that one rule: a dict (so ``in``, ``get`` and ``pop`` work as
they always did), ``add`` refusing a second, different owner of a name, ``need`` failing with
the known names, and entries declared *by reference* (``"package.module:attribute"``) that are
imported the first time they are needed, exactly as an entry point is.

Declared references are how a low module reaches a higher one without importing it:
``Graph``, ``RunResult``, ``Result`` and ``Benchmark`` declare their notebook displays as
ordinary methods that call :func:`display`, and :data:`DISPLAY` names the functions that draw
them in ``notebook.py`` (which imports the renderer). Nothing is attached to a class and
nothing is registered when ``evaldag.engine`` is imported; the drawing code is imported when
a notebook first shows an object. This module imports nothing of evaldag, so every module may
import it without a cycle.

What is still registered when a module is imported, and why: a plugin's declarations of
itself, in the module that defines them: ``@metric`` (``declare.py``), a request kind
(``requests.register_kind``) and the handler a backend serves it with
(``HFAdapter.handlers.add``). Each is part of the definition beside it, as a decorator is;
every scorer that yields the kind imports that module, and the engine cannot name a plugin's
module by reference (it knows plugins only through entry points). The tables refuse a
second owner of a name, so importing twice is harmless and a clash is one line.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Generic, Mapping, TypeVar

V = TypeVar("V")


def _identity(value: Any) -> tuple[str, str] | Any:
    """What makes two registrations the same one: a class or function by where it is defined
    (a module imported twice, or reloaded, registers the same thing again)."""
    if hasattr(value, "__module__") and hasattr(value, "__qualname__"):
        return value.__module__, value.__qualname__
    return value


class NameTable(dict, Generic[V]):
    """name -> value; ``what`` names the table in messages (``"request kind"``).

    ``refs`` declares entries by reference, ``{"name": "package.module:attribute"}``: the
    module is imported by :meth:`need` (or ``registry[name]``) the first time the name is asked
    for, so declaring costs no import and creates no import edge.
    """

    def __init__(self, what: str, entries: Mapping[str, V] | None = None, *, refs: Mapping[str, str] | None = None):
        super().__init__(entries or {})
        self.what = what
        self.refs: dict[str, str] = dict(refs or {})

    def add(self, name: str, value: V) -> V:
        """Register ``value`` under ``name``; the same value again is fine, another one is an error."""
        old = dict.get(self, name)
        if old is not None and _identity(old) != _identity(value):
            where = ".".join(_identity(old)) if isinstance(_identity(old), tuple) else repr(old)
            raise ValueError(f"{self.what} {name!r} is already registered by {where}")
        self[name] = value
        return value

    def names(self) -> list[str]:
        return sorted({*self, *self.refs})

    def __missing__(self, name: str) -> V:
        ref = self.refs.get(name)
        if ref is None:
            raise KeyError(f"unknown {self.what} {name!r}; registered: {', '.join(self.names()) or 'none'}")
        module, _, attr = ref.partition(":")
        value = getattr(import_module(module), attr)
        self[name] = value
        return value

    def need(self, name: str) -> V:
        """The value of ``name`` (a declared reference imported now); an unknown name fails naming the known ones."""
        return self[name]


#: how the engine's objects show themselves in a notebook; ``notebook.py`` draws them
DISPLAY: NameTable[Any] = NameTable("display", refs={
    "graph_svg": "evaldag.engine.notebook:graph_svg",
    "run_result_html": "evaldag.engine.notebook:run_result_html",
    "result_html": "evaldag.engine.notebook:result_html",
    "benchmark_html": "evaldag.engine.notebook:benchmark_html",
    "to_pandas": "evaldag.engine.notebook:to_pandas",
})


def display(name: str, obj: Any, *args: Any, **kw: Any) -> Any:
    """Call the display ``name`` on ``obj`` (what a class's ``_repr_html_`` and friends do)."""
    return DISPLAY.need(name)(obj, *args, **kw)


__all__ = ["DISPLAY", "NameTable", "display"]
