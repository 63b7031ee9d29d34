"""The editing benchmark's data: edit requests and a text set, shipped or from files.

Edit files are JSON (a list) or JSON lines, one edit per row, in either shape:

* flat: ``{"prompt", "subject", "target_true", "target_new", "paraphrase_prompts",
  "neighborhood_prompts"}``, the subject already in the prompt;
* CounterFact's (ROME): ``{"requested_rewrite": {"prompt": "{} was born in", "subject",
  "target_true": {"str"}, "target_new": {"str"}}, "paraphrase_prompts", "neighborhood_prompts"}``,
  the prompt a template with ``{}`` for the subject.

Both become the flat shape the metrics read. Text files are JSON / JSON lines of
``{"text": ...}`` rows (or bare strings) or plain text, one text per non-empty line.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...metrics.editing.prompts import check_edit
from ..textfile import json_lines, read_utf8

HERE = Path(__file__).resolve().parent
SHIPPED_EDITS = HERE / "data" / "edits.json"
SHIPPED_TEXTS = HERE / "data" / "texts.json"
FIELDS = ("case_id", "prompt", "subject", "target_true", "target_new", "paraphrase_prompts", "neighborhood_prompts")


def _read_rows(path: Path) -> list:
    text = read_utf8(path, rows=path.suffix == ".jsonl")
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except ValueError:
        return json_lines(text, path)


def _target(x: object) -> object:
    return x.get("str") if isinstance(x, dict) else x


def normalise_edit(row: dict, index: int, source: str = "") -> dict:
    """One edit in the flat shape (CounterFact rows are filled in), checked."""
    where = f"{source}: " if source else ""
    if not isinstance(row, dict):
        raise ValueError(f"{where}edit {index} is a {type(row).__name__}, not an object")
    if "requested_rewrite" in row:
        rw = row["requested_rewrite"]
        template, subject = rw.get("prompt", ""), rw.get("subject", "")
        if "{}" not in template:
            raise ValueError(f"{where}edit {index}: CounterFact prompt {template!r} has no '{{}}' for the subject")
        flat = {"case_id": row.get("case_id", index), "prompt": template.format(subject), "subject": subject,
                "target_true": _target(rw.get("target_true")), "target_new": _target(rw.get("target_new"))}
    else:
        flat = {k: row.get(k) for k in ("case_id", "prompt", "subject", "target_true", "target_new")}
        flat["case_id"] = row.get("case_id", index)
    flat["paraphrase_prompts"] = list(row.get("paraphrase_prompts") or [])
    flat["neighborhood_prompts"] = list(row.get("neighborhood_prompts") or [])
    try:
        check_edit(flat, index)
    except ValueError as e:
        raise ValueError(f"{where}{e}") from None
    return flat


def load_edits(path: str | Path | None = None) -> list[dict]:
    """The edits of ``path`` (default: the shipped set), normalised and checked."""
    p = Path(path) if path else SHIPPED_EDITS
    if not p.is_file():
        raise FileNotFoundError(f"edits file not found: {p}")
    rows = _read_rows(p)
    if not rows:
        raise ValueError(f"{p}: no edits")
    return [normalise_edit(r, i, str(p)) for i, r in enumerate(rows)]


def load_texts(path: str | Path | None = None) -> list[dict]:
    """``[{"text": ...}]`` from ``path`` (default: the shipped text set)."""
    p = Path(path) if path else SHIPPED_TEXTS
    if not p.is_file():
        raise FileNotFoundError(f"texts file not found: {p}")
    if p.suffix in (".json", ".jsonl"):
        rows = _read_rows(p)
        texts = [r.get("text") if isinstance(r, dict) else r for r in rows]
    else:
        texts = [line for line in read_utf8(p, rows=True).splitlines() if line.strip()]
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t]
    if bad or not texts:
        raise ValueError(f"{p}: every row needs a non-empty 'text' (rows {bad[:5]})" if bad else f"{p}: no texts")
    return [{"text": t} for t in texts]
