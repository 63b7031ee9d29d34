"""The report's views of ``ROBUSTNESS.json`` and ``METAEVAL.json``: HTML tables, nothing computed.

Why here and not in ``render/``: the tables read the files ``robustness_report.py`` and
``metaeval.py`` write, and ``render/`` knows nothing of the engine's files beyond a run's
own. ``RobustnessSection`` is a report plugin (``render.report_html.ReportPlugin``): a run
folder that holds ``ROBUSTNESS.json`` gets a "Robustness under attacks" section (before and
after per metric, per attack, with its score); ``metaeval_page`` is the meta-evaluation's
own page (``METAEVAL.html`` beside ``METAEVAL.json``).
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from .metaeval import table_rows
from .render.html import num_cell, page
from .render.report_html import RunFolder, Section

ROBUSTNESS_FILE = "ROBUSTNESS.json"


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("attacks"), dict) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _table(head: list[str], rows: list[str]) -> str:
    ths = "".join(f'<th class="ed-num">{escape(h)}</th>' if 0 < i < len(head) - 1 else f"<th>{escape(h)}</th>" for i, h in enumerate(head))
    return f'<table class="ed-table"><thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _score_cell(cell: Any) -> str:
    if not isinstance(cell, dict):
        return num_cell(None)
    if "refused" in cell:
        return f'<td class="ed-num" title="{escape(str(cell["refused"]))}">refused</td>'
    v = _num(cell.get("value"))
    if v is None:
        return f'<td class="ed-num" title="{escape(str(cell.get("reason", "")))}">undefined</td>'
    return num_cell(v)


def robustness_html(data: dict[str, Any]) -> str:
    """One table per attack: metric, before, after (and the retain model's, for a relearning), the
    score (R or Q), the change's verdict."""
    f = data.get("formula") or {}
    parts = [f'<p class="ed-lead">{escape(str(f.get("name", "")))}: R = {escape(str(f.get("R", "")))}; '
             f'Q = {escape(str(f.get("Q", "")))} ({escape(str(f.get("source", "")))}). '
             "Values are the metrics as published; R and Q use each metric's knowledge form (higher = more knowledge).</p>"]
    for name, a in data["attacks"].items():
        if not isinstance(a, dict) or not isinstance(a.get("metrics"), dict):
            continue
        score = a.get("score")
        control = score == "R"  # relearning: the retain model's values before and after the same relearn beside
        rows = []
        for key, row in a["metrics"].items():
            if not isinstance(row, dict):
                continue
            verdict = (row.get("change") or {}).get("verdict") or ""
            retain = f"{num_cell(_num(row.get('retain_before')))}{num_cell(_num(row.get('retain_after')))}" if control else ""
            rows.append(f"<tr><td>{escape(key)}</td>{num_cell(_num(row.get('before')))}{num_cell(_num(row.get('after')))}"
                        f"{retain}{_score_cell(row.get(score)) if score else num_cell(None)}<td>{escape(verdict)}</td></tr>")
        parts.append(f"<h3>{escape(name)}" + (f" (scored by {escape(score)})" if score else "") + "</h3>")
        if control and a.get("retain_folders"):
            parts.append(f'<p class="ed-lead">control: the retain model relearned by the same recipe '
                         f'({escape(" → ".join(map(str, a["retain_folders"])))}).</p>')
        head = ["metric", "before", "after", *(["retain before", "retain after"] if control else []), score or "score",
                "change (paired, item by item)"]
        parts.append(_table(head, rows))
    hm = [h for h in data.get("hm") or [] if isinstance(h, dict)]
    if hm:
        rows = [f"<tr><td>{escape(str(h.get('metric')))}</td>{num_cell(_num(h.get('R')))}{num_cell(_num(h.get('Q')))}"
                f"{_score_cell(h.get('HM'))}<td>{escape(str(h.get('relearn')))} × {escape(str(h.get('quantize')))}</td></tr>" for h in hm]
        parts += ["<h3>HM(R, Q)</h3>", _table(["metric", "R", "Q", "HM", "attacks"], rows)]
    return "\n".join(parts)


class RobustnessSection:
    """A report plugin that is no benchmark: each run folder's ``ROBUSTNESS.json``, if any."""

    splits: tuple = ()

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        out = []
        for r in runs:  # from the run's own set only: OUT's name may still point at an older set
            data = _read(Path(r.path) / ROBUSTNESS_FILE)
            if data is not None:
                out.append(Section("Robustness under attacks on the model", robustness_html(data), order=60, id="robustness"))
        return out


def metaeval_html(data: dict[str, Any]) -> str:
    """The meta-evaluation's table: faithfulness AUC with its interval, and per attack the mean score."""
    rows = table_rows(data)
    attacks = list(dict.fromkeys(a for r in rows for a in r["robustness"]))
    body = []
    for r in rows:
        cells = "".join(num_cell(_num(r["robustness"].get(a))) for a in attacks)
        hm = num_cell(_num(r["hm"][0])) if attacks and r["hm"] else (num_cell(None) if attacks else "")
        body.append(f"<tr><td>{escape(r['metric'])}</td>{num_cell(_num(r['auc']))}{num_cell(_num(r['lo']))}{num_cell(_num(r['hi']))}"
                    f"{cells}{hm}<td>{escape(r['note'])}</td></tr>")
    head = ["metric", "faithfulness AUC", "low", "high", *[f"mean score, {a}" for a in attacks], *(["HM"] if attacks else []), "note"]
    lead = escape(str(data.get("faithfulness_formula", "")))
    return f'<p class="ed-lead">{lead}</p>' + _table(head, body)


def metaeval_page(data: dict[str, Any]) -> str:
    pool = data.get("pool") or {}
    sub = f"{len(pool.get('knows', []))} knows, {len(pool.get('does-not-know', []))} does-not-know models"
    return page("evaldag meta-evaluation of metrics", metaeval_html(data), subtitle=sub)
