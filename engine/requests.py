"""Units of model work: frozen, hashable request values and their results.

A scorer never calls a model; it emits these values. Because they are plain frozen
dataclasses of ints, strings and floats, two metrics asking for the same forward pass
produce *equal* requests, and the executor serves them once. ``key()`` is the
request's identity in the request cache (combined there with the model fingerprint);
it is a hash of a type tag and the fields, never of Python object identity.

Results hold numpy arrays only (no tensors, no logits), so they can be stored in
safetensors and handed to every node that asked.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from .hooks import NameTable

# Bump when the way a request is computed changes (e.g. the stats kernel); it is part
# of every request key, so old cached results are not reused.
REQUEST_SCHEMA = "1"


class Request:
    """Base of every request type. Subclasses are frozen dataclasses."""

    kind: ClassVar[str] = "request"
    # What a backend lacks when it cannot serve this kind, in a refusal ("gradients").
    words: ClassVar[str] = ""
    # At most this many per batch before the adapter's group_budget widens it (1: one backward per sample).
    max_batch: ClassVar[int | None] = None
    # The executor serves a stage's kinds cheapest first (0: one forward pass per sequence; 1: a
    # forward per new token; 2: a backward pass per row), so a run stopped in a long stage has
    # already stored the cheap answers.
    cost_rank: ClassVar[int] = 0
    # Results larger than this many bytes are handed to the scorers but not kept in the request
    # store (None: always kept); e.g. a prompt's full-vocabulary logits, megabytes each.
    max_stored_bytes: ClassVar[int | None] = None
    # Which side padding goes in a batch of this kind ("right" for teacher forcing,
    # "left" for generation); the adapter honours it.
    padding_side: ClassVar[str] = "right"

    @functools.cached_property
    def _key(self) -> str:
        payload: dict = {"kind": self.kind, "schema": REQUEST_SCHEMA}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if f.metadata.get("key_omits_default") and v == f.default:
                continue  # a field added later: at its default the key stays what it was before
            payload[f.name] = _keyed(v) if dataclasses.is_dataclass(v) else v
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def key(self) -> str:
        return self._key

    def length(self) -> int:
        """Tokens this request puts through the model (for sorting and budgets)."""
        raise NotImplementedError

    def prefix(self) -> tuple[int, ...] | None:
        """The leading ids an adapter may compute once for every request of a batch that shares
        them (``ModelAdapter.share_prefixes``), or None: this kind shares nothing."""
        return None


def _keyed(value: Any) -> dict:
    """A dataclass field of a request as its key sees it: ``asdict``, less the fields added
    later (``key_omits_default``) that are at their default, so old keys stay what they were."""
    out = dataclasses.asdict(value)
    for f in dataclasses.fields(value):
        if f.metadata.get("key_omits_default") and getattr(value, f.name) == f.default:
            del out[f.name]
    return out


@dataclass(frozen=True)
class TokenStats(Request):
    """Per-token statistics of ``continuation_ids`` given ``context_ids`` (teacher forcing).

    For every continuation token t the result holds: the target log-prob, the argmax
    token of the prediction for t, and the mean ``mu = sum_v p_v log p_v`` and variance
    ``var = sum_v p_v (log p_v)^2 - mu^2`` of the log-probs under the model's own
    distribution. These few numbers serve probability, truth ratio, extraction strength,
    exact memorization and the LOSS, ZLib, Min-K% and Min-K%++ attacks.
    """

    context_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]
    kind: ClassVar[str] = "token_stats"
    words: ClassVar[str] = "token statistics"
    padding_side: ClassVar[str] = "right"

    def length(self) -> int:
        return len(self.context_ids) + len(self.continuation_ids)

    def prefix(self) -> tuple[int, ...]:
        """The context: a question's answers (TOFU's paraphrased and perturbed ones, a task's
        options) share it."""
        return self.context_ids


@dataclass(frozen=True)
class GenerationSettings:
    """How to generate. ``seed`` is required for sampling so results are reproducible."""

    max_new_tokens: int = 200
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    # sample among the k likeliest tokens only (0: all); ROME's context templates draw with top-k 5
    top_k: int = field(default=0, metadata={"key_omits_default": True})

    def __post_init__(self) -> None:
        if self.do_sample and self.seed is None:
            raise ValueError("GenerationSettings: sampling needs an explicit seed")
        if self.max_new_tokens < 1:
            raise ValueError("GenerationSettings: max_new_tokens must be >= 1")


@dataclass(frozen=True)
class Generate(Request):
    """Generate from ``prompt_ids``; the result has the new token ids and decoded text.

    ``sample_index`` tells apart several answers wanted for one prompt (a probe's
    repetitions): requests that differ only in it are distinct work. A sampling model
    takes its randomness from ``settings.seed`` alone; a recorded-answers model (replay)
    looks an answer up by prompt and ``sample_index``.
    """

    prompt_ids: tuple[int, ...]
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    sample_index: int = field(default=0, metadata={"key_omits_default": True})
    kind: ClassVar[str] = "generate"
    cost_rank: ClassVar[int] = 1  # a forward pass per new token
    words: ClassVar[str] = "generation"
    padding_side: ClassVar[str] = "left"

    def length(self) -> int:
        return len(self.prompt_ids) + self.settings.max_new_tokens


@dataclass(frozen=True)
class GenerateText(Request):
    """Generate from a prompt *text*, for backends that work on text (a chat endpoint,
    recorded answers, a Python callable): no tokenizer is faked to carry it as ids.
    The result is a :class:`GenerateResult` whose ``token_ids`` are empty."""

    prompt: str
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    sample_index: int = 0
    kind: ClassVar[str] = "generate_text"
    cost_rank: ClassVar[int] = 1  # a forward pass per new token
    words: ClassVar[str] = "generation from text"
    padding_side: ClassVar[str] = "left"

    def length(self) -> int:
        return len(self.prompt.encode("utf-8")) // 4 + 1  # a rough token count, for budgets only


@dataclass(frozen=True)
class HiddenStates(Request):
    """Hidden states of ``ids`` at ``layers`` (0 = embeddings output)."""

    ids: tuple[int, ...]
    layers: tuple[int, ...]
    kind: ClassVar[str] = "hidden_states"
    words: ClassVar[str] = "hidden states"
    padding_side: ClassVar[str] = "right"

    def length(self) -> int:
        return len(self.ids)


# ----------------------------------------------------------------------------- results


class ArrayResult:
    """A request's result as the request store and the ranks' exchange keep it: named arrays
    (:meth:`to_arrays`), read back by :meth:`from_arrays` (with the JSON ``meta()`` a result
    may add). Default: every dataclass field is an array, stored under its name, in order; a
    field that is None (not available from this backend) is not stored and reads back as None;
    a result with other fields (text, a float) overrides both."""

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}  # type: ignore[arg-type]

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict) -> Any:
        return cls(*(arrays.get(f.name) for f in fields(cls)))  # type: ignore[arg-type]


@dataclass
class TokenStatsResult(ArrayResult):
    """Arrays of length ``len(continuation_ids)``: logprob, argmax, mu, var (float32/int32).

    ``mu``/``var`` are ``None`` where the backend cannot give the full-vocabulary statistics
    (a server, vLLM): "not available" is its own state, never a NaN that would read as
    non-finite logits."""

    logprob: np.ndarray
    argmax: np.ndarray
    mu: np.ndarray | None
    var: np.ndarray | None


def pack_token_stats(results: "list[TokenStatsResult]") -> dict[str, np.ndarray]:
    """Many results as flat arrays plus ``offsets`` (CSR): one tensor per field in the store.

    A scorer over thousands of items should return this rather than a list of small
    arrays: the store then reads 5 tensors instead of thousands. ``mu``/``var`` are left
    out when any result lacks them (not available from its backend).
    """
    lengths = [len(r.logprob) for r in results]
    offsets = np.zeros(len(results) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)

    def cat(name: str, dtype: type) -> np.ndarray:
        parts = [getattr(r, name) for r in results]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    out = {"logprob": cat("logprob", np.float32), "argmax": cat("argmax", np.int32), "offsets": offsets}
    for name in ("mu", "var"):
        if all(getattr(r, name) is not None for r in results):
            out[name] = cat(name, np.float32)
    return out


def unpack_token_stats(packed: dict[str, np.ndarray]) -> "list[TokenStatsResult]":
    """Inverse of :func:`pack_token_stats` (views into the flat arrays, no copies)."""
    o = packed["offsets"]
    return [
        TokenStatsResult(*(packed[f][o[i] : o[i + 1]] if f in packed else None for f in ("logprob", "argmax", "mu", "var")))
        for i in range(len(o) - 1)
    ]


@dataclass
class GenerateResult(ArrayResult):
    """New token ids (without the prompt, without padding) and their decoded text.

    ``nonfinite``: some step's logits held a NaN or an infinity, so the tokens are an
    argmax over garbage (the ids alone cannot tell; kept in the store's meta)."""

    token_ids: np.ndarray
    text: str
    nonfinite: bool = False

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"token_ids": self.token_ids}

    def meta(self) -> dict:
        return {"text": self.text, **({"nonfinite": True} if self.nonfinite else {})}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict) -> "GenerateResult":
        return cls(arrays["token_ids"], meta["text"], bool(meta.get("nonfinite", False)))


def nonfinite_output(result: Any) -> bool:
    """Whether a model answer came from non-finite logits (or hidden states).

    Token statistics and hidden states of a finite model are finite, so a NaN or an
    infinity in them is the model's; a generation says so itself. Gradient norms are left
    out: an empty target gives NaN there without any fault in the model. Statistics a backend
    cannot give are ``None`` (not available), never NaN, so they raise no flag.
    """
    if isinstance(result, GenerateResult):
        return result.nonfinite
    if isinstance(result, (TokenStatsResult, HiddenStatesResult)):
        return any(a.dtype.kind == "f" and not np.isfinite(a).all() for a in result.to_arrays().values())
    return False


@dataclass
class HiddenStatesResult(ArrayResult):
    """``states[i]`` is the ``[len(ids), hidden]`` array at ``layers[i]``."""

    states: np.ndarray


# ----------------------------------------------------------------------------- the kind registry

# kind -> request class / result class, one NameTable each (hooks.py: a second owner of a kind
# is refused, an unknown kind is an error naming the known ones). The engine's own kinds are
# declared here with their classes. A plugin's kind is registered by ``register_kind`` in the
# module that defines it, on import, and deliberately so: the registration is part of the
# kind's definition (as ``@metric`` is of a metric's), every scorer that yields the kind
# imports that module, and a stored result of a kind whose module is not imported is read as
# a miss (cache/requests.py), never as a wrong value.
REQUEST_TYPES: NameTable[type[Request]] = NameTable("request kind", {
    c.kind: c for c in (TokenStats, Generate, GenerateText, HiddenStates)})
RESULT_TYPES: NameTable[type] = NameTable("request result", {
    TokenStats.kind: TokenStatsResult, Generate.kind: GenerateResult, GenerateText.kind: GenerateResult,
    HiddenStates.kind: HiddenStatesResult})


def too_large(kind: str, arrays: dict) -> bool:
    """A result over its kind's ``max_stored_bytes`` (full-vocabulary logits of a large
    vocabulary): served to its scorers, never written to the request store."""
    cap = getattr(REQUEST_TYPES.get(kind), "max_stored_bytes", None)
    return cap is not None and sum(np.asarray(a).nbytes for a in arrays.values()) > cap


def register_kind(request_cls: type[Request], result_cls: type) -> None:
    """Declare a request kind and its result type (``to_arrays``/``from_arrays``, optional ``meta``).

    A plugin calls this when its module is imported, then registers a handler with the
    backends that serve the kind (``HFAdapter.handlers.add``); no engine module changes.
    """
    REQUEST_TYPES.add(request_cls.kind, request_cls)
    RESULT_TYPES[request_cls.kind] = result_cls


def kind_of(kind: str) -> type[Request]:
    """The request class of ``kind``; an unknown kind is an error naming the known ones."""
    return REQUEST_TYPES.need(kind)


def result_type(kind: str) -> type:
    kind_of(kind)
    return RESULT_TYPES[kind]

