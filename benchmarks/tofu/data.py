"""TOFU data: subsets from a local folder or the Hub, prompt templates, retain-model logs.

What open-unlearning reads (commit d3d7cf9): ``datasets.load_dataset("locuslab/TOFU",
name=<subset>, split="train")`` (``src/data/qa.py``), the ``template_args`` of a model
config (``configs/model/*.yaml``) and the retain model's ``TOFU_EVAL.json``
(``retain_logs_path``). Here:

* :func:`load_subset` reads ``<folder>/<subset>.json`` (JSON lines, as the Hub's files
  are, or a JSON array: detected), ``.jsonl`` or ``.parquet`` (needs pyarrow), or a Hub
  dataset id when ``datasets`` is installed. Rows come back as plain dicts in file order;
  their position is open-unlearning's ``index`` (``add_dataset_index``), the key of every
  ``value_by_index``. Each row is checked for the fields its subset's metrics read, and a
  bad row is an error naming file, row (0-based, said so) and field, before any model is loaded.
  A UTF-8 byte-order mark at the start of a file is accepted.
* :func:`load_template_args` reads a model config (or a bare mapping) into a
  :class:`PromptTemplate`.
* ``eval_logs.py`` reads a retain model's ``TOFU_EVAL.json`` (open-unlearning's or ours).

Every text file is read through ``benchmarks/textfile.py``: bytes that are not UTF-8
are an error naming file, line, column, byte and (JSON lines) row. Every field a metric
scores must hold text: empty or whitespace-only is refused like a missing field, since
an empty paraphrase turns one row's truth ratio from 0.45 into 1.8 million (the
probability of nothing is 1) and an empty perturbed answer does the same to the wrong side.
The readers here are shared with ``benchmarks/muse/data.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Iterable, Mapping

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr, ValidationError

from evaldag.engine.adapters.base import PromptTemplate

from ..textfile import BOM, NotUTF8, decode_utf8, read_utf8

SUFFIXES = (".json", ".jsonl", ".parquet")


class DataError(ValueError):
    """Bad or missing input data; the message names the file, row and field."""


# ------------------------------------------------------------------ row kinds


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("is empty or whitespace only: a scored field needs at least 1 non-space character")
    return text


#: a field a metric scores: a string with something in it
Text = Annotated[StrictStr, AfterValidator(_not_blank)]


class QARow(BaseModel):
    """question -> answer (forgetNN, retainNN, holdoutNN, full; Q_A_Prob, ROUGE, MIA)."""

    model_config = ConfigDict(extra="allow")
    question: Text
    answer: Text


class PerturbedRow(QARow):
    """forgetNN_perturbed / retain_perturbed: truth ratio needs the paraphrase and options."""

    paraphrased_answer: Text
    perturbed_answer: list[Text] = Field(min_length=1)


class OptionsRow(QARow):
    """real_authors_perturbed / world_facts_perturbed: answer against perturbed options."""

    perturbed_answer: list[Text] = Field(min_length=1)


ROW_KINDS: dict[str, type[BaseModel]] = {"qa": QARow, "perturbed": PerturbedRow, "options": OptionsRow}


def row_kind(subset: str) -> str:
    """Which fields a TOFU subset must have, from its name."""
    if re.fullmatch(r"forget\d\d_perturbed|retain_perturbed", subset):
        return "perturbed"
    if subset in ("real_authors_perturbed", "world_facts_perturbed"):
        return "options"
    return "qa"


def tofu_splits(forget_split: str = "forget10", holdout_split: str | None = None) -> dict[str, str]:
    """The subsets a TOFU evaluation reads, for ``forget01`` / ``forget05`` / ``forget10``.

    As ``configs/eval/tofu_metrics/*.yaml``: the forget metrics read
    ``<forget_split>_perturbed``, the MIAs' holdout side ``holdout<NN>``.
    """
    m = re.fullmatch(r"forget(\d\d)", forget_split)
    if not m:
        raise DataError(f"forget_split must look like 'forget01', 'forget05' or 'forget10', not {forget_split!r}")
    return {
        "forget": f"{forget_split}_perturbed",
        "holdout": holdout_split or f"holdout{m.group(1)}",
        "retain": "retain_perturbed",
        "real_authors": "real_authors_perturbed",
        "world_facts": "world_facts_perturbed",
    }


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


def load_records(source: str | Path, stem: str, hub_name: str | None, hub_split: str) -> tuple[list[dict], str]:
    """Records and their origin: a local folder's ``<stem>.*`` file, else a Hub dataset."""
    if Path(source).is_dir():
        path = find_subset_file(source, stem)
        return read_records(path), str(path)
    if Path(source).exists():
        raise DataError(f"{source}: expected a folder holding {stem}.json (or .jsonl/.parquet), got a file")
    origin = f"{source} (hub, name={hub_name}, split={hub_split})"
    return read_hub(str(source), hub_name, hub_split), origin


# ------------------------------------------------------------------ TOFU subsets


def load_subset(source: str | Path, subset: str, *, kind: str | None = None, split: str = "train") -> list[dict]:
    """One TOFU subset's rows, validated for the fields its metrics need.

    ``source`` is a folder with ``<subset>.json`` / ``.jsonl`` / ``.parquet``, or a Hub id
    (``locuslab/TOFU``) loaded as ``name=subset, split=split``. ``kind`` overrides the
    row kind guessed from the subset name (``"qa"``, ``"perturbed"``, ``"options"``).
    """
    kind = kind or row_kind(subset)
    if kind not in ROW_KINDS:
        raise DataError(f"unknown row kind {kind!r}; use one of {sorted(ROW_KINDS)}")
    records, origin = load_records(source, subset, subset, split)
    if not records:
        raise DataError(f"{origin}: subset {subset!r} has no rows")
    return validate_rows(records, ROW_KINDS[kind], origin)


def load_tofu(source: str | Path, forget_split: str = "forget10", holdout_split: str | None = None) -> dict[str, list[dict]]:
    """Every subset a TOFU evaluation reads, keyed as :func:`tofu_splits` names them."""
    return {role: load_subset(source, name) for role, name in tofu_splits(forget_split, holdout_split).items()}


# ------------------------------------------------------------------ template args


def _read_mapping(path: Path) -> Any:
    text = read_utf8(path)
    if path.suffix == ".json":
        return json.loads(text)
    import yaml

    return yaml.safe_load(text)


def load_template_args(path: str | Path) -> PromptTemplate:
    """A :class:`PromptTemplate` from an open-unlearning model config or a bare mapping.

    The file (YAML, or JSON by suffix) either has a ``template_args:`` key (as
    ``configs/model/*.yaml`` do, next to ``model_args``/``tokenizer_args``) or *is* the
    mapping. Unknown keys are an error naming them; Hydra interpolations (``${...}``)
    are not resolved and are refused.
    """
    path = Path(path)
    try:
        data = _read_mapping(path)
    except NotUTF8 as e:
        raise DataError(str(e)) from None
    except Exception as e:  # yaml/json syntax errors, unreadable file
        raise DataError(f"{path}: cannot read template args: {e}") from None
    if not isinstance(data, Mapping):
        raise DataError(f"{path}: expected a mapping, got {type(data).__name__}")
    args = data.get("template_args", data)
    if not isinstance(args, Mapping):
        raise DataError(f"{path}: template_args must be a mapping, got {type(args).__name__}")
    known = set(PromptTemplate.model_fields)
    unknown = sorted(str(k) for k in args if k not in known)
    if unknown:
        hint = "" if "template_args" in data else " (a model config must put them under template_args:)"
        raise DataError(f"{path}: unknown template keys {unknown}; allowed: {sorted(known)}{hint}")
    interp = sorted(k for k, v in args.items() if isinstance(v, str) and "${" in v)
    if interp:
        raise DataError(f"{path}: Hydra interpolations are not resolved here: {interp}")
    try:
        return PromptTemplate(**args)
    except ValidationError as e:
        err = e.errors()[0]
        raise DataError(f"{path}: template key {'.'.join(map(str, err['loc']))!r}: {err['msg']}") from None
