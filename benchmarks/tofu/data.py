"""TOFU data: its subsets, from a local folder or the Hub, and the fields each must have.

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
* the retain model's ``TOFU_EVAL.json`` is read by ``benchmarks/unlearning/eval_logs.py``
  and the template args by ``benchmarks/template_args.py`` (both shared).

Every text file is read through ``benchmarks/textfile.py``: bytes that are not UTF-8
are an error naming file, line, column, byte and (JSON lines) row. Every field a metric
scores must hold text: empty or whitespace-only is refused like a missing field, since
an empty paraphrase turns one row's truth ratio from 0.45 into 1.8 million (the
probability of nothing is 1) and an empty perturbed answer does the same to the wrong side.
The readers are ``benchmarks/unlearning/rows.py``, shared with MUSE.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..unlearning.rows import DataError, Text, load_records, validate_rows

__all__ = ["DataError", "OptionsRow", "PerturbedRow", "QARow", "ROW_KINDS", "load_subset", "load_tofu", "row_kind", "tofu_splits"]


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
