"""Edit requests as token ids: the prompt, the subject's token range, the targets.

An edit row (what the ``edits`` resource holds, see benchmarks/editing/data.py) is a
dict: ``prompt`` (the subject already filled in), ``subject``, ``target_true``,
``target_new``, and optional ``paraphrase_prompts`` / ``neighborhood_prompts``.
Prompts are tokenized with the tokenizer's special tokens (a bos where it adds one),
targets without, each separately, as ROME does. No model, no file.
"""

from __future__ import annotations

from typing import Any, Sequence


def encode(encoder: Any, text: str, special: bool = True) -> tuple[int, ...]:
    """Text -> ids through the model's encoder (``encode`` where it has one, else its tokenizer)."""
    if hasattr(encoder, "encode"):
        return tuple(encoder.encode(text, add_special_tokens=special))
    return tuple(encoder.tokenizer(text, add_special_tokens=special)["input_ids"])


def target_ids(encoder: Any, target: str) -> tuple[int, ...]:
    ids = encode(encoder, target, special=False)
    if not ids:
        raise ValueError(f"target {target!r} tokenizes to nothing")
    return ids


def subject_range(encoder: Any, ids: Sequence[int], subject: str, prompt: str = "",
                  occurrence: str = "first") -> tuple[int, int]:
    """ROME's ``find_token_range``: the tokens covering the first occurrence of ``subject``.

    Each token is decoded on its own (special tokens kept) and the pieces joined; the
    range runs from the token in which the subject starts to the one in which it ends.
    ``occurrence="last"`` takes the last occurrence instead (for prompts that name the
    subject twice, e.g. a question and the start of its answer).
    """
    pieces = [encoder.decode([t], skip_special_tokens=False) for t in ids]
    whole = "".join(pieces)
    at = whole.find(subject) if occurrence == "first" else whole.rfind(subject)
    if at < 0:
        raise ValueError(f"subject {subject!r} is not in the prompt {prompt or whole!r}")
    start = end = None
    loc = 0
    for i, piece in enumerate(pieces):
        loc += len(piece)
        if start is None and loc > at:
            start = i
        if end is None and loc >= at + len(subject):
            end = i + 1
            break
    assert start is not None and end is not None
    return start, end


def check_edit(row: dict, index: int) -> None:
    """The fields every metric reads, and the subject inside the prompt (before any model work)."""
    for key in ("prompt", "subject", "target_true", "target_new"):
        if not isinstance(row.get(key), str) or not row[key]:
            raise ValueError(f"edit {index}: field {key!r} must be a non-empty string")
    if row["subject"] not in row["prompt"]:
        raise ValueError(f"edit {index}: subject {row['subject']!r} is not in its prompt {row['prompt']!r}")
    for which in ("paraphrase", "neighborhood"):
        for p in row.get(f"{which}_prompts") or []:
            ok = isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("prompt"), str)
                                        and isinstance(p.get("target_true"), str) and p["target_true"])
            if not ok:
                raise ValueError(f"edit {index}: each {which} prompt is a string or "
                                 f"{{'prompt': ..., 'target_true': ...}}, not {p!r}")


def prompts_of(row: dict, which: str) -> list[tuple[str, str]]:
    """(prompt, true answer) pairs: the rewrite prompt, the paraphrases or the neighbourhood prompts.

    A neighbourhood prompt is a string (CounterFact: a neighbour that shares the edit's
    true answer) or ``{"prompt": ..., "target_true": ...}`` (a neighbour with its own answer).
    """
    if which == "rewrite":
        return [(row["prompt"], row["target_true"])]
    out = []
    for p in row.get(f"{which}_prompts") or []:
        out.append((p["prompt"], p["target_true"]) if isinstance(p, dict) else (p, row["target_true"]))
    return out
