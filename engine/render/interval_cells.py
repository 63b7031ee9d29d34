"""The bootstrap intervals beside the report's metric values: a run's ``<GROUP>_INTERVALS_EVAL.json``
(``--bootstrap-resamples N``) read for the ``<GROUP>`` table's cells and its caption.

Apart from ``report_html.py`` so the metrics table stays one job: it draws values; this says how
sure each one is, only where the run measured it.
"""

from __future__ import annotations

from html import escape

from .view import fmt_num

INTERVALS = "_INTERVALS"  # the interval files' group suffix: <GROUP>_INTERVALS_EVAL.json beside <GROUP>_EVAL.json


def interval_of(evals: dict[str, dict], bench: str, name: str) -> dict | None:
    """The metric's block of the run's ``<bench>_INTERVALS_EVAL.json``, when it has a percentile interval."""
    b = (evals.get(bench + INTERVALS) or {}).get(name)
    ci = b.get("percentile") if isinstance(b, dict) else None
    ok = isinstance(ci, list) and len(ci) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in ci)
    return b if ok else None


def with_interval(cell: str, value: float | None, block: dict | None) -> str:
    """A value's cell with its percentile interval beside it in brackets: the bounds as drawn, since a
    percentile interval need not be symmetric about the value (a ``±`` would pretend it is)."""
    if value is None or block is None or not cell.endswith("</td>"):
        return cell
    lo, hi = block["percentile"]
    return cell[: -len("</td>")] + f' <span class="ed-ci">[{escape(fmt_num(lo))}, {escape(fmt_num(hi))}]</span></td>'


def interval_caption(each_run: list[dict[str, dict]], bench: str) -> str:
    """Once per table: the level and resample count of the intervals beside its values (``each_run``: each
    run's EVAL groups; none written: no caption)."""
    kinds = []
    for evals in each_run:
        for b in (evals.get(bench + INTERVALS) or {}).values():
            if isinstance(b, dict) and b.get("percentile") is not None:
                kind = (b.get("confidence_level"), b.get("n_resamples"))
                if kind not in kinds:
                    kinds.append(kind)
    if not kinds:
        return ""
    said = "; ".join(f"{fmt_num(100 * lv) if isinstance(lv, (int, float)) else '?'}% percentile bootstrap intervals over "
                     f"items, {n} resamples" for lv, n in kinds)
    return (f'<caption class="ed-muted">In brackets: {escape(said)} ({escape(bench)}_INTERVALS_EVAL.json; '
            "docs/uncertainty.md).</caption>")
