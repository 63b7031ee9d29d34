"""The row readers TOFU and MUSE share: records from a local file or the Hub, checked per row.

open-unlearning reads both benchmarks with ``datasets.load_dataset(<id>, name=..., split=...)``.
Here a local folder holds one file per subset (``<stem>.json`` as JSON lines or an array,
detected; ``.jsonl``; ``.parquet`` with pyarrow), or the source is a Hub id when
``datasets`` is installed. Rows come back as plain dicts in file order; their position is
open-unlearning's ``index`` (``add_dataset_index``), the key of every ``value_by_index``.
:func:`validate_rows` checks each row against the pydantic model of the fields its
metrics read and names file, row (0-based, said so) and field of the first bad one,
before any model loads. Every field a metric scores is :data:`Text`: empty or
whitespace-only is refused like a missing field, since an empty paraphrase turns one
row's truth ratio from 0.45 into 1.8 million (the probability of nothing is 1).
Bytes that are not UTF-8 are refused through ``benchmarks/textfile.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Iterable

from pydantic import AfterValidator, BaseModel, StrictStr, ValidationError

from ...engine.adapters.spec import path_shaped
from ..textfile import BOM, DataError, decode_utf8

SUFFIXES = (".json", ".jsonl", ".parquet")

__all__ = ["DataError", "SUFFIXES", "Text", "find_subset_file", "load_records", "read_hub", "read_records", "validate_rows"]


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("is empty or whitespace only: a scored field needs at least 1 non-space character")
    return text


#: a field a metric scores: a string with something in it
Text = Annotated[StrictStr, AfterValidator(_not_blank)]


# ------------------------------------------------------------------ reading records


def _read_json_lines(text: str, origin: str) -> list[Any]:
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DataError(
                f"{origin}: line {lineno} (row {len(records)}, 0-based) is not a JSON object: {e.msg}; "
                "a .json file must be JSON lines or one JSON array"
            ) from None
    return records


def read_records(path: str | Path) -> list[dict]:
    """Records of a ``.json`` (JSON lines or array, detected), ``.jsonl`` or ``.parquet`` file."""
    path = Path(path)
    origin = str(path)
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError(f"{origin}: reading parquet needs pyarrow (pip install pyarrow)") from None
        records: list[Any] = pq.read_table(path).to_pylist()
    elif path.suffix in (".json", ".jsonl"):
        data = path.read_bytes()
        is_array = path.suffix == ".json" and data.removeprefix(BOM).lstrip()[:1] == b"["
        text = decode_utf8(data, origin, rows=not is_array)
        if is_array:
            try:
                records = json.loads(text)
            except json.JSONDecodeError as e:
                raise DataError(f"{origin}: invalid JSON array at line {e.lineno}: {e.msg}") from None
        else:
            records = _read_json_lines(text, origin)
    else:
        raise DataError(f"{origin}: unsupported file type {path.suffix!r}; use one of {SUFFIXES}")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise DataError(f"{origin}: row {i} (0-based) is a {type(rec).__name__}, not a JSON object")
    return records


def find_subset_file(folder: str | Path, stem: str) -> Path:
    """``<folder>/<stem>{.json,.jsonl,.parquet}``: exactly one must exist."""
    folder = Path(folder)
    found = [folder / f"{stem}{s}" for s in SUFFIXES if (folder / f"{stem}{s}").is_file()]
    if not found:
        raise DataError(f"{folder}: no {stem}.json, {stem}.jsonl or {stem}.parquet")
    if len(found) > 1:
        raise DataError(f"{folder}: {stem} is ambiguous, found {[p.name for p in found]}; keep one")
    return found[0]


def read_hub(dataset_id: str, name: str | None, split: str) -> list[dict]:
    """Rows of a Hub dataset via ``datasets.load_dataset`` (imported only here)."""
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{dataset_id!r} is not a local folder, and loading from the Hub needs the "
            "`datasets` package (pip install datasets)"
        ) from None
    ds = datasets.load_dataset(dataset_id, name=name, split=split)
    return [dict(r) for r in ds]


def validate_rows(records: Iterable[dict], model: type[BaseModel], origin: str) -> list[dict]:
    """Check every record against ``model``; the first bad one raises a :class:`DataError`.

    The records themselves are returned unchanged (every field kept), so what is
    hashed and scored is exactly what the file holds.
    """
    out = []
    for i, rec in enumerate(records):
        try:
            model.model_validate(rec)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(row)"
            got: Any = rec
            for part in err["loc"]:  # the value itself, also inside a list (perturbed_answer.1)
                try:
                    got = got[part]
                except (KeyError, IndexError, TypeError):
                    got = None
                    break
            shown = "missing" if err["type"] == "missing" else f"got {got!r:.60}"
            msg = err["msg"].removeprefix("Value error, ")
            raise DataError(f"{origin}: row {i} (0-based), field {where!r}: {msg} ({shown})") from None
        out.append(rec)
    return out


def load_records(source: str | Path, stem: str, hub_name: str | None, hub_split: str,
                 flag: str = "--data") -> tuple[list[dict], str]:
    """Records and their origin: a local folder's ``<stem>.*`` file, else a Hub dataset
    (a path-shaped source that does not exist is "no such folder", never a hub lookup)."""
    if Path(source).is_dir():
        path = find_subset_file(source, stem)
        return read_records(path), str(path)
    if Path(source).exists():
        raise DataError(f"{source}: expected a folder holding {stem}.json (or .jsonl/.parquet), got a file")
    if path_shaped(str(source)):
        raise DataError(f"{flag} {source}: no such folder: {source}")
    origin = f"{source} (hub, name={hub_name}, split={hub_split})"
    return read_hub(str(source), hub_name, hub_split), origin
