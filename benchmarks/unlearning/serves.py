"""What ``--metrics all`` brings in: every metric this run's resources can serve.

``all`` is a word for "everything", not a list of demands: a run with no retain model, no
reference model or no classifier cannot give the metrics that read one, and stopping on them
(the Reference attack's missing ``reference_model``) would make ``all`` unusable for the common
case of one checkpoint. (``forget_quality`` and ``privleak`` without a retain side are served:
open-unlearning's answer, no value with its reason and a reference AUC of 0.5, each said in the
results.) So a metric only ``all`` brought in is left out when none of the run's
inputs that serve it was given, and the run says so in one stderr line naming each and the flags
that serve it. A metric named outright (``all,mia_reference``) stays, and is refused as before:
one line with the flag that supplies what it needs.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

#: metric -> (the run's inputs any one of which serves it, the flags that give them)
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "mia_reference": (("reference_model", "retain_model"), "--reference-model or --retain-model"),
    "forget_Q_A_gibberish": (("classifier_model",), "--classifier-model"),
    "forget_gibberish": (("classifier_model",), "--classifier-model"),
}


def servable(names: Iterable[str], words: str | None, given: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, str]]:
    """``names`` (the menu's expansion of ``words``) without what only ``all`` brought in and none
    of ``given``'s inputs (``reference_model``, ``retain_model``, ``retain_logs``, ``classifier_model``)
    serves; and ``{left out: the flags that serve it}``, in menu order."""
    said = [w.strip() for w in (words or "").split(",")]
    if "all" not in {w.lower() for w in said}:
        return tuple(names), {}
    left = {n: NEEDS[n][1] for n in names
            if n in NEEDS and n not in said and not any(given.get(k) for k in NEEDS[n][0])}
    return tuple(n for n in names if n not in left), left


def note(group: str, left: Mapping[str, str]) -> str:
    """The one stderr line for what ``all`` left out (sorted by name)."""
    shown = ", ".join(f"{n} (needs {flags})" for n, flags in sorted(left.items()))
    return f"evaldag: note: {group} --metrics all leaves out what this run cannot serve: {shown}"


__all__ = ["NEEDS", "note", "servable"]
