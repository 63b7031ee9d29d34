"""A run's generations beside their gold answers, read from its EVAL files: the first sanity check
on a new model, in the report (the unlearning plugin's "Generations" section) and in the terminal
(``evaldag report OUT --generations``).

An item generates when its entry in ``value_by_index`` carries ``generation`` and ``ground_truth``
(open-unlearning's ROUGE shape, MUSE's too); nothing here names a benchmark or a metric.
"""

from __future__ import annotations

from typing import Any, Iterator

SHOWN = 5  # items of each generating metric shown


def generation_rows(entry: Any) -> list[tuple[str, dict]]:
    """The items of a ROUGE entry that carry a generation and its gold answer, in item order."""
    items = entry.get("value_by_index") if isinstance(entry, dict) else None
    if not isinstance(items, dict):
        return []
    rows = []
    for k, v in items.items():
        if not isinstance(v, dict):
            continue
        gen, gold = _first(v.get("generation")), _gold(v.get("ground_truth"))
        if gen is not None and gold is not None:
            rows.append((k, {"generation": gen, "ground_truth": gold, "input": _first(v.get("input")) or ""}))
    return rows


def _first(value: Any) -> str | None:
    """A text field; ``*_PERT_ROUGE`` repeats it once per perturbed answer: the first."""
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return value if isinstance(value, str) else None


def _gold(value: Any) -> str | None:
    """The gold answer as text; the perturbed answers of ``*_PERT_ROUGE`` are a list: joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        return " | ".join(value)
    return None


def text_lines(evals: dict[str, dict], where: str, shown: int = SHOWN) -> Iterator[str]:
    """The terminal's lines for one run (``{BENCH: EVAL contents}``): per generating metric a
    ``== NAME · WHERE`` line, then each of its first ``shown`` items as prompt, gold and generation,
    one line each (a newline inside a text is shown as ``\\n``)."""
    one = lambda text: text.replace("\n", "\\n")  # noqa: E731
    for name in sorted({n for e in evals.values() for n, entry in e.items() if generation_rows(entry)}):
        rows = [r for e in evals.values() for r in generation_rows(e.get(name))][:shown]
        yield f"== {name} · {where}"
        for k, v in rows:
            yield f"  [{k}] {one(v['input'])}"
            yield f"    gold: {one(v['ground_truth'])}"
            yield f"    said: {one(v['generation'])}"
