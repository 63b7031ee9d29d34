"""Scorers: the only metrics that ask a model for anything, and they only ask.

Each turns dataset rows into requests with the model's encoder (the tokenizer side;
weights stay on disk) and returns the results in row order. Everything else in the
library is an aggregator over these. Because a scorer's identity is its params +
model + rows, ``forget_Q_A_Prob``, ``extraction_strength`` and every MIA attack on the
forget split share one ``qa_stats`` node, and the three forget ROUGE metrics share one
``qa_generations`` node: each sequence is forwarded, each prompt generated, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from ...engine import Generate, GenerationSettings, Params, TokenStats, metric
from ...engine.adapters.base import PromptTemplate
from ...engine.requests import pack_token_stats, unpack_token_stats
from .grad_backend import GradNorm


class QAParams(Params):
    """How a question/answer row becomes ids (open-unlearning's QADataset)."""

    field: str = "answer"  # the answer column; a list column gives one sequence per option
    question_key: str = "question"
    template: PromptTemplate = PromptTemplate()
    joint_tokenization: bool = False  # False reproduces open-unlearning's boundary quirk
    answer_only: bool = False  # False scores the template's turn end and the appended eos, as open-unlearning does
    max_length: int = 512
    fewshot_key: str | None = None  # resource holding few-shot rows (MUSE knowmem ICL)


def _answer_only(params: QAParams) -> dict:
    """``answer_only=True`` only when asked: an encoder written before the option keeps working."""
    return {"answer_only": True} if params.answer_only else {}


def _options(row: dict, field: str, where: str) -> list[str]:
    if field not in row:
        raise KeyError(f"{where}: row has no field {field!r}")
    v = row[field]
    return list(v) if isinstance(v, (list, tuple)) else [v]


@metric("qa_stats", version="1", params=QAParams, needs=("model", "data"),
        requests={"model": {"token_stats": ("logprob", "argmax")}})
def qa_stats(model: Any, data: list[dict], params: QAParams):
    """Per-token stats of each answer (each option of a list field) given its question."""
    enc = model.encoder()
    reqs, n_opts, cut = [], [], []
    for i, row in enumerate(data):
        opts = _options(row, params.field, f"row {i}")
        n_opts.append(len(opts) if isinstance(row[params.field], (list, tuple)) else 0)
        for ans in opts:
            e = enc.encode_qa(row[params.question_key], ans, params.template, joint=params.joint_tokenization,
                              max_length=params.max_length, **_answer_only(params))
            reqs.append(TokenStats(e.context_ids, e.continuation_ids))
            cut.append(e.truncated)
    results = yield reqs
    return _scored(enc, reqs, results, n_opts, cut)


def _scored(enc: Any, reqs: list[TokenStats], results: list, n_opts: list[int], cut: list[int]) -> dict:
    """Stats (CSR-packed), the scored ids, their decoded text (for ZLib), the row layout
    and the tokens ``max_length`` cut from each sequence."""
    labels = [np.asarray(r.continuation_ids, dtype=np.int64) for r in reqs]
    return {
        "stats": pack_token_stats(results),
        "labels": np.concatenate(labels) if labels else np.zeros(0, np.int64),
        "n_options": np.asarray(n_opts, dtype=np.int64),
        "texts": [enc.decode(r.continuation_ids, skip_special_tokens=True) for r in reqs],
        "truncated": np.asarray(cut, dtype=np.int64),
    }


def note_truncation(block: dict, scored: dict) -> dict:
    """Add ``truncated_tokens`` (summed over a row's options) to each item that was cut.

    Items nothing was cut from get no key, so untruncated outputs stay as open-unlearning's.
    """
    cut = scored.get("truncated")
    vbi = block.get("value_by_index")
    if cut is None or vbi is None or not cut.any():
        return block
    pos = 0
    for key, n in zip(list(vbi), scored["n_options"].tolist()):
        k = max(n, 1)
        total = int(cut[pos : pos + k].sum())
        pos += k
        if total > 0 and isinstance(vbi[key], dict):
            vbi[key]["truncated_tokens"] = total
    return block


def carry_truncation(vbi: dict | None, *sources: dict | None) -> dict | None:
    """Add to each item of ``vbi`` the ``truncated_tokens`` its parents' items carry, summed.

    For metrics built from other blocks (truth ratio, normalised probability); an item
    none of whose parents was cut gets no key.
    """
    if not vbi:
        return vbi
    for key, item in vbi.items():
        total = sum(int(s[key].get("truncated_tokens", 0)) for s in sources
                    if s and isinstance(s.get(key), dict))
        if total > 0 and isinstance(item, dict):
            item["truncated_tokens"] = total
    return vbi


@dataclass
class Scored:
    """One scored sequence: per-token arrays, the label ids and the decoded label text."""

    logprob: np.ndarray
    argmax: np.ndarray
    mu: np.ndarray
    var: np.ndarray
    labels: np.ndarray
    text: str


def rows_of(scored: dict) -> list[list[Scored]]:
    """A scorer's output regrouped per dataset row: one Scored per answer option.

    ``n_options`` is 0 for a row with a single (string) answer, K for a list of K.
    """
    items = unpack_token_stats(scored["stats"])
    offsets = scored["stats"]["offsets"]
    flat = [
        Scored(s.logprob, s.argmax, s.mu, s.var, scored["labels"][offsets[i] : offsets[i + 1]], scored["texts"][i])
        for i, s in enumerate(items)
    ]
    out, pos = [], 0
    for n in scored["n_options"].tolist():
        k = max(n, 1)
        out.append(flat[pos : pos + k])
        pos += k
    return out


def has_options(scored: dict) -> bool:
    """True when the scored field was a list column (perturbed answers)."""
    return bool(len(scored["n_options"]) and scored["n_options"].max() > 0)


class GenParams(Params):
    """Greedy generation from each question prompt (open-unlearning's generation config)."""

    question_key: str = "question"
    template: PromptTemplate = PromptTemplate()
    max_new_tokens: int = 200
    stop_strings: tuple[str, ...] = ()
    fewshot: tuple[tuple[str, str], ...] = Field(default=(), description="in-context (question, answer) turns")
    max_length: int = 512


#: a row field that starts the assistant's turn (a prompt transform's, e.g. ``jailbreak_prefix``): generation
#: continues after it, and ROUGE's ground truth is what follows it. Rows without it are prompted as before.
PREFILL_KEY = "assistant_prefill"


def prefill_ids(enc: Any, row: dict) -> tuple[int, ...]:
    """The ids of ``row``'s assistant prefill (tokenized alone, no special tokens); () when it has none."""
    text = row.get(PREFILL_KEY)
    return tuple(enc.encode(text, add_special_tokens=False)) if text else ()


@metric("qa_generations", version="1", params=GenParams, needs=("model", "data"), requests={"model": {"generate": ()}})
def qa_generations(model: Any, data: list[dict], params: GenParams):
    """One greedy generation per question prompt, whatever the number of metrics reading it."""
    enc = model.encoder()
    # the prompt does not depend on the answer; pass an empty one
    prompts = [tuple(enc.encode_qa(row[params.question_key], "", params.template, fewshot=params.fewshot, max_length=params.max_length).prompt_ids)
               + prefill_ids(enc, row) for row in data]
    return (yield from _generate(prompts, params.max_new_tokens, params.stop_strings))


def _generate(prompts: list[tuple[int, ...]], max_new_tokens: int, stop_strings: tuple[str, ...]):
    """Greedy generations for ``prompts``, with the prompt ids kept for the ground truth."""
    settings = GenerationSettings(max_new_tokens=max_new_tokens, stop_strings=stop_strings)
    results = yield [Generate(p, settings) for p in prompts]
    return {"generations": [r.text for r in results], "prompt_ids": [np.asarray(p, dtype=np.int64) for p in prompts]}


class CompletionParams(Params):
    """How a prefix/text row becomes ids (open-unlearning's CompletionDataset)."""

    prefix_key: str | None = "prompt"
    text_key: str = "gt"
    insert_space: bool = True
    max_length: int = 2048


@metric("completion_stats", version="1", params=CompletionParams, needs=("model", "data"),
        requests={"model": {"token_stats": ("logprob", "argmax")}})
def completion_stats(model: Any, data: list[dict], params: CompletionParams):
    """Per-token stats of each text given its prefix (no eos appended, as the reference)."""
    enc = model.encoder()
    reqs, cut = [], []
    for row in data:
        e = enc.encode_completion(_prefix(row, params), row[params.text_key], insert_space=params.insert_space, max_length=params.max_length)
        reqs.append(TokenStats(e.context_ids, e.continuation_ids))
        cut.append(e.truncated)
    results = yield reqs
    return _scored(enc, reqs, results, [0] * len(reqs), cut)


class CompletionGenParams(CompletionParams):
    max_new_tokens: int = 128
    stop_strings: tuple[str, ...] = ()


@metric("completion_generations", version="1", params=CompletionGenParams, needs=("model", "data"),
        requests={"model": {"generate": ()}})
def completion_generations(model: Any, data: list[dict], params: CompletionGenParams):
    """One greedy continuation per prefix."""
    enc = model.encoder()
    prompts = [enc.encode_completion(_prefix(row, params), row[params.text_key], insert_space=params.insert_space, max_length=params.max_length).prompt_ids for row in data]
    return (yield from _generate(prompts, params.max_new_tokens, params.stop_strings))


def _prefix(row: dict, params: Any) -> str:
    return row.get(params.prefix_key, "") if params.prefix_key else ""


class GradNormParams(QAParams):
    p: float = 2.0
    completion: bool = False  # score a prefix/text row instead of a question/answer row
    prefix_key: str | None = "prompt"
    text_key: str = "gt"
    insert_space: bool = True
    max_length: int | None = None  # None: open-unlearning's 512 for QA rows, 2048 for completions


@metric("grad_norms", version="2", params=GradNormParams, needs=("model", "data"), requests={"model": {"grad_norm": ()}})
def grad_norms(model: Any, data: list[dict], params: GradNormParams):
    """Per-item gradient norms of the answer's mean NLL (``values``), and the tokens
    ``max_length`` cut from each item (``truncated``), as the stats nodes keep them."""
    enc = model.encoder()
    reqs, cut = [], []
    for row in data:
        if params.completion:
            e = enc.encode_completion(_prefix(row, params), row[params.text_key], insert_space=params.insert_space,
                                      max_length=params.max_length or CompletionParams().max_length)
        else:
            e = enc.encode_qa(row[params.question_key], row[params.field], params.template, joint=params.joint_tokenization,
                              max_length=params.max_length or QAParams().max_length, **_answer_only(params))
        # open-unlearning leaves the appended eos out of GradNorm's loss; answer-only ids have none to leave out
        reqs.append(GradNorm(e.context_ids, e.continuation_ids, p=params.p, exclude_last=not (params.answer_only and not params.completion)))
        cut.append(e.truncated)
    results = yield reqs
    return {"values": np.asarray([r.value for r in results], dtype=np.float64),
            "truncated": np.asarray(cut, dtype=np.int64), "n_options": np.zeros(len(reqs), dtype=np.int64)}
