"""Picking a checkpoint by a rule over SUMMARY names: ``--select`` and the callback's ``select=``.

The rule language (docs/training.md) is small on purpose::

    max model_utility where forget_quality >= 0.05
    min forget_Q_A_Prob where model_utility > 0.5 and forget_quality >= 0.01
    pareto                                   # max forget_quality, max model_utility
    pareto max forget_quality, min forget_Q_A_Prob where model_utility >= 0.4

``max``/``min NAME`` chooses one checkpoint: the best value among those meeting every
condition (a tie goes to the earliest step); ``pareto A, B`` chooses every checkpoint no
other beats on both (each axis ``max`` unless written ``min``). A condition is ``NAME OP
NUMBER`` with OP one of ``>= <= > < == !=``. The keywords (``max min pareto where and``)
are read in any case; NAME is a key of the runs' SUMMARY files; a name
no checkpoint has fails with the close matches. A checkpoint without a number for a name the
rule reads (a NaN written as null) is left out and counted in the reason.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq, "!=": operator.ne}
PARETO_DEFAULT = (("max", "forget_quality"), ("max", "model_utility"))
_COND = re.compile(r"^\s*([A-Za-z_][\w.@-]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
_AXIS = re.compile(r"^\s*(?:(max|min)\s+)?([A-Za-z_][\w.@-]*)\s*$", re.IGNORECASE)


class RuleError(ValueError):
    """A rule that does not parse, or names a metric no checkpoint has."""


@dataclass(frozen=True)
class Rule:
    text: str
    kind: str  # "max", "min" or "pareto"
    axes: tuple[tuple[str, str], ...]  # (direction, name): one for max/min, two for pareto
    conditions: tuple[tuple[str, str, float], ...] = ()

    def names(self) -> list[str]:
        return list(dict.fromkeys([n for _, n in self.axes] + [n for n, _, _ in self.conditions]))


@dataclass
class Selection:
    rule: str
    chosen: list[str]  # checkpoint names, in the rows' order
    why: str
    values: dict[str, dict[str, float]] = field(default_factory=dict)  # chosen -> the rule's numbers

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "checkpoints": self.chosen, "why": self.why, "values": self.values}


def parse(text: str) -> Rule:
    """The rule in ``text``; RuleError saying what was expected otherwise."""
    parts = re.split(r"\s+where\s+", text.strip(), maxsplit=1, flags=re.IGNORECASE)  # keywords in any case
    head, conds_text = parts[0].strip(), (parts[1] if len(parts) > 1 else "")
    conditions = []
    if len(parts) > 1:
        for piece in re.split(r"\s+and\s+", conds_text.strip(), flags=re.IGNORECASE):
            m = _COND.match(piece)
            if not m:
                raise RuleError(f"--select {text!r}: cannot read the condition {piece.strip()!r} "
                                "(expected NAME OP NUMBER, OP one of >= <= > < == !=)")
            conditions.append((m.group(1), m.group(2), float(m.group(3))))
    words = head.split(None, 1)
    kind = words[0].lower() if words else ""
    rest = words[1] if len(words) > 1 else ""
    if kind in ("max", "min"):
        if not re.fullmatch(r"[A-Za-z_][\w.@-]*", rest.strip()):
            raise RuleError(f"--select {text!r}: {kind} takes one metric name, e.g. '{kind} model_utility'")
        return Rule(text, kind, ((kind, rest.strip()),), tuple(conditions))
    if kind == "pareto":
        if not rest.strip():
            return Rule(text, kind, PARETO_DEFAULT, tuple(conditions))
        axes = []
        for piece in rest.split(","):
            m = _AXIS.match(piece)
            if not m:
                raise RuleError(f"--select {text!r}: cannot read the axis {piece.strip()!r} (expected [max|min] NAME)")
            axes.append(((m.group(1) or "max").lower(), m.group(2)))
        if len(axes) != 2:
            raise RuleError(f"--select {text!r}: pareto takes two metrics, e.g. 'pareto forget_quality, model_utility'")
        return Rule(text, kind, tuple(axes), tuple(conditions))
    raise RuleError(f"--select {text!r}: a rule starts with max, min or pareto "
                    "(e.g. 'max model_utility where forget_quality >= 0.05')")


def _number(v: Any) -> float | None:
    if isinstance(v, dict):  # {"value": null, "reason": ...}
        v = v.get("value")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def check_names(rule: Rule, known: Sequence[str]) -> None:
    """Every name the rule reads is a SUMMARY name of some checkpoint (else the close matches)."""
    for name in rule.names():
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(sorted(known)) or '(none)'}"
            raise RuleError(f"--select {rule.text!r}: no checkpoint has a metric {name!r}; {hint}")


def select(rule: Rule | str, rows: Sequence[tuple[str, dict[str, Any]]]) -> Selection:
    """Apply ``rule`` to ``rows`` (checkpoint name, SUMMARY values), ordered by step."""
    rule = parse(rule) if isinstance(rule, str) else rule
    check_names(rule, sorted({k for _, s in rows for k in s}))
    names = rule.names()
    usable, missing, failing = [], [], []
    for name, summary in rows:
        vals = {n: _number(summary.get(n)) for n in names}
        if any(v is None for v in vals.values()):
            missing.append(name)
        elif all(OPS[op](vals[n], x) for n, op, x in rule.conditions):
            usable.append((name, vals))
        else:
            failing.append(name)
    where = " and ".join(f"{n} {op} {x:g}" for n, op, x in rule.conditions)
    left = "".join([f"; {len(failing)} fail {where}" if failing else "",
                    f"; {len(missing)} without a value for {', '.join(names)}" if missing else ""])
    if not usable:
        return Selection(rule.text, [], f"no checkpoint qualifies ({len(rows)} checked{left})")
    if rule.kind in ("max", "min"):
        (direction, metric), = rule.axes
        pick = (max if direction == "max" else min)(usable, key=lambda r: r[1][metric])  # first of equals: earliest
        word = "highest" if direction == "max" else "lowest"
        scope = f"of {len(usable)} checkpoints" + (f" with {where}" if where else "")
        return Selection(rule.text, [pick[0]], f"{pick[0]}: the {word} {metric} ({pick[1][metric]:.6g}) {scope}{left}",
                         {pick[0]: pick[1]})
    sign = [1.0 if d == "max" else -1.0 for d, _ in rule.axes]
    key = [(name, tuple(s * vals[n] for s, (_, n) in zip(sign, rule.axes))) for name, vals in usable]
    front = [name for name, p in key
             if not any(all(a >= b for a, b in zip(q, p)) and q != p for _, q in key)]
    axes = ", ".join(f"{d} {n}" for d, n in rule.axes)
    return Selection(rule.text, front, f"the Pareto set of {axes}: {', '.join(front)} "
                     f"({len(front)} of {len(usable)}" + (f" with {where}" if where else "") + f"){left}",
                     {name: vals for name, vals in usable if name in front})


def parse_conditions(text: str) -> tuple[tuple[str, str, float], ...]:
    """``"forget_quality >= 0.05 and model_utility > 0.5"`` (the callback's ``stop_when=``)."""
    return parse(f"max _ where {text}").conditions


def holds(conditions: Sequence[tuple[str, str, float]], values: dict[str, Any]) -> bool:
    """Every condition holds for ``values`` (a name without a number: it does not)."""
    nums = {n: _number(values.get(n)) for n, _, _ in conditions}
    return all(nums[n] is not None and OPS[op](nums[n], x) for n, op, x in conditions)
