"""The handler registry of the open-unlearning layer (``open_unlearning_compat.py`` explains the layer).

Kept apart so that the HF side (``open_unlearning_compat_hf.py``) and the nodes share one
registry without importing each other.
"""

from __future__ import annotations

import ast
import inspect
import logging
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ...engine.declare import REGISTRY
from ...engine.fingerprint import code_identity

#: open-unlearning's handlers log through ``evals.metrics.base.logger``; ported files import this one
logger = logging.getLogger("evaldag.open_unlearning")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True, eq=False)
class Handler:
    """A registered handler: its name, the user's function, and whether it calls the model."""

    name: str
    fn: Callable[..., Any]

    def __call__(self, model: Any, **kwargs: Any) -> Any:  # usable as the function it wraps (tests, notebooks)
        return self.fn(model, **kwargs)

    @property
    def code(self) -> str:
        return code_identity(self.fn)

    @property
    def calls_model(self) -> bool:
        return calls_model(self.fn)


#: handler name -> Handler, filled by :class:`unlearning_metric` (open-unlearning's METRICS_REGISTRY)
HANDLERS: dict[str, Handler] = {}


class unlearning_metric:  # noqa: N801 - open-unlearning's spelling, so a ported file changes only its import
    """``@unlearning_metric(name="my_handler")``: register a handler under ``name`` (default: the function's)."""

    def __init__(self, name: str | None = None):
        self.name = name

    def __call__(self, fn: Callable[..., Any]) -> Handler:
        name = self.name or fn.__name__
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"@unlearning_metric: handler name {name!r} must be an identifier")
        params = list(inspect.signature(fn).parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise ValueError(f"@unlearning_metric({name!r}): a handler takes (model, **kwargs)")
        handler = Handler(name, fn)
        HANDLERS[name] = handler  # a file imported again (same name) replaces its handler, as a module reload would
        return handler


def find_handler(name: str) -> Handler | None:
    """A registered handler; installed packages register theirs through ``evaldag.metrics`` entry points."""
    if name not in HANDLERS:
        REGISTRY.load_entry_points()
    return HANDLERS.get(name)


def calls_model(fn: Callable[..., Any]) -> bool:
    """Whether the function's body reads its first argument (``model``): then it needs a loaded model.

    Read from the source, so a handler that only aggregates never causes a model to load.
    Without source (a lambda typed in a REPL) it is taken to call the model: the safe side.
    """
    first = next(iter(inspect.signature(fn).parameters))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return True
    body = tree.body[0]
    if not isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    return any(isinstance(n, ast.Name) and n.id == first for stmt in body.body for n in ast.walk(stmt))



def plain(x: Any) -> Any:
    """JSON-able Python values (numpy scalars and arrays, tuples) for handlers and the request payload."""
    if isinstance(x, Mapping):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if hasattr(x, "tolist"):  # numpy / torch scalars and arrays
        return plain(x.tolist())
    return x
