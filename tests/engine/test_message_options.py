"""Every option a user-facing message names is one the command line takes now.

A message is the text of an exception raised, a ``print`` or a ``warnings.warn`` in ``engine/``,
``benchmarks/`` and ``metrics/``; each ``--option`` in it must be declared by a parser of
``evaldag`` (every benchmark's ``run``, ``graph`` and the other commands) and not be a deprecated
spelling (those are said only by their own deprecation line, which names what replaces them)."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from evaldag.engine.adapters.model_args import DeprecatedAlias, DeprecatedFlag
from evaldag.engine.cli.main import parser
from evaldag.engine.registry import BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?![\w-])")
#: (message text, option) pairs that name a deprecated spelling on purpose, or another program's option
ALLOWED = {
    ("give --template or --template-args, not both", "--template-args"),  # the user gave both
}
OTHER_PROGRAMS = {"make_edit": {"--method", "--edits", "--layer", "--steps", "--corpus"}}  # python -m ...make_edit


def _options() -> tuple[set[str], set[str]]:
    live, old = set(), set()

    def walk(p: argparse.ArgumentParser) -> None:
        for a in p._actions:
            (old if isinstance(a, (DeprecatedFlag, DeprecatedAlias)) else live).update(
                s for s in a.option_strings if s.startswith("--"))
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    walk(sub)

    for bench in BENCHMARKS.names():
        walk(parser([bench]))
    return live, old - live


def _is_message(call: ast.Call) -> bool:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
    return name in ("print", "warn") or name.endswith(("Error", "Exception", "Refused", "Failure", "Warning"))


def _messages():
    for top in ("engine", "benchmarks", "metrics"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and _is_message(node):
                    for part in ast.walk(node):
                        if isinstance(part, ast.Constant) and isinstance(part.value, str):
                            yield f"{path.relative_to(ROOT)}:{node.lineno}", part.value


def test_every_option_a_message_names_is_a_current_option():
    live, old = _options()
    assert {"--model", "--model-arg", "--metrics", "--cache-read-from", "--attack"} <= live and "--tokenizer" in old
    bad = []
    for where, text in _messages():
        for option in OPTION.findall(text):
            if option in live or (text, option) in ALLOWED:
                continue
            if any(f"{prog} {option}" in text or f"{prog} --" in text and option in opts
                   for prog, opts in OTHER_PROGRAMS.items()):
                continue
            bad.append(f"{where}: {option} ({'deprecated' if option in old else 'no such option'}): {text[:90]!r}")
    assert bad == []
