"""MUSE data: the verbmem / knowmem / privleak splits, locally or from the Hub.

open-unlearning (commit d3d7cf9, ``configs/data/datasets/MUSE_*.yaml``) reads
``muse-bench/MUSE-<News|Books>`` as ``load_dataset(path, name=<config>, split=<split>)``:

===========  =====================================================  ======================
config       splits                                                 fields read
===========  =====================================================  ======================
verbmem      forget                                                 prompt (prefix), gt
knowmem      forget_qa, retain_qa, forget_qa_icl, retain_qa_icl     question, answer
privleak     forget, holdout, retain                                text (no prefix)
===========  =====================================================  ======================

A local folder holds one file per (config, split), named ``<config>_<split>.json``
(JSON lines or array), ``.jsonl`` or ``.parquet``, as ``tests/fixtures/muse_tiny`` does.
Row positions are open-unlearning's ``index``. Knowmem's few-shot prompt uses **all**
rows of the ``*_icl`` split, in file order. Readers and errors are the ones
TOFU uses too (``benchmarks/unlearning/rows.py``): every field above must hold text (empty or whitespace-only
is refused, naming file, row and field), bytes that are not UTF-8 are refused naming
file, line and byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, ConfigDict

from ..unlearning.eval_logs import EvalLogs, needs, read_eval_logs
from ..unlearning.rows import DataError, Text, load_records, validate_rows


class VerbmemRow(BaseModel):
    """Verbatim memorization: generate ``gt`` from ``prompt`` (CompletionDataset)."""

    model_config = ConfigDict(extra="allow")
    prompt: Text
    gt: Text


class KnowmemRow(BaseModel):
    """Knowledge memorization: question -> answer, few-shot from the ``*_icl`` split."""

    model_config = ConfigDict(extra="allow")
    question: Text
    answer: Text


class PrivleakRow(BaseModel):
    """Membership inference: the whole ``text`` is scored (the prefix key is absent)."""

    model_config = ConfigDict(extra="allow")
    text: Text


SPLITS: dict[str, tuple[type[BaseModel], tuple[str, ...]]] = {
    "verbmem": (VerbmemRow, ("forget",)),
    "knowmem": (KnowmemRow, ("forget_qa", "retain_qa", "forget_qa_icl", "retain_qa_icl")),
    "privleak": (PrivleakRow, ("forget", "holdout", "retain")),
}


def load_muse_split(source: str | Path, config: str, split: str) -> list[dict]:
    """Rows of one MUSE split, validated for the fields its metrics read.

    ``source`` is a folder with ``<config>_<split>.json`` (or ``.jsonl``/``.parquet``)
    or a Hub id such as ``muse-bench/MUSE-News`` (needs ``datasets``).
    """
    if config not in SPLITS:
        raise DataError(f"unknown MUSE config {config!r}; use one of {sorted(SPLITS)}")
    model, splits = SPLITS[config]
    if split not in splits:
        raise DataError(f"MUSE {config} has no split {split!r}; use one of {list(splits)}")
    records, origin = load_records(source, f"{config}_{split}", config, split)
    if not records:
        raise DataError(f"{origin}: MUSE {config}/{split} has no rows")
    return validate_rows(records, model, origin)


def load_muse(source: str | Path) -> dict[str, list[dict]]:
    """Every split a default MUSE evaluation reads, keyed ``<config>_<split>``.

    ``privleak_retain`` is not read by any default metric and is left out.
    """
    wanted = [("verbmem", "forget"), *[("knowmem", s) for s in SPLITS["knowmem"][1]],
              ("privleak", "forget"), ("privleak", "holdout")]
    return {f"{c}_{s}": load_muse_split(source, c, s) for c, s in wanted}


def fewshot_pairs(icl_rows: list[dict]) -> tuple[tuple[str, str], ...]:
    """All ICL rows as (question, answer) turns, in order (``QADataset.fs_data``)."""
    return tuple((r["question"], r["answer"]) for r in icl_rows)


def load_eval_logs(path: str | Path, metrics: Iterable[str] | None = None) -> EvalLogs:
    """A retain model's ``MUSE_EVAL.json``: privleak (when ``metrics`` asks for it) needs
    ``mia_min_k.agg_value``; MUSE has no forget quality."""
    return read_eval_logs(path, need_truth_ratio=False, need_min_k=needs(metrics)["need_min_k"])
