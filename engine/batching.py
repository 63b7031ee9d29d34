"""Batch planning: which requests share a forward pass. Pure Python, no torch.

Sorting longest first and packing under a token budget is what makes batching pay: in
dataset order a batch of 32 pads to its longest member (44 % padding on TOFU-like
data), sorted it pads almost nothing. Longest first also means the first batch is the
most expensive one, so an out-of-memory error happens at once, not at the end, and
the time estimate errs high rather than low.

A batch's cost is counted as ``len(batch) * longest``: every row is padded to the
longest, and padding costs as much compute and memory as real tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

# CPU: a 4,096-token budget was no faster than batches of 32 (ENVIRONMENT.md), and larger
# batches only add latency and memory.
CPU_TOKENS, CPU_MAX_BATCH = 4096, 32
# CUDA: use at most this share of the free memory for activations; the rest absorbs the
# estimate's error and the allocator's fragmentation. OOM back-off covers what is left.
CUDA_MEMORY_SHARE = 0.5
CUDA_MIN_TOKENS, CUDA_MAX_TOKENS, CUDA_MAX_BATCH = 2048, 262_144, 128
CUDA_FALLBACK_TOKENS = 8192  # when the adapter gives no memory hint
# mps shares memory with the host and reports no free figure: a moderate fixed budget.
MPS_TOKENS, MPS_MAX_BATCH = 8192, 32


@dataclass(frozen=True)
class Budget:
    """At most ``tokens`` padded tokens and ``max_batch`` sequences per batch."""

    tokens: int
    max_batch: int

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.max_batch < 1:
            raise ValueError(f"Budget needs tokens >= 1 and max_batch >= 1, got {self}")


def default_budget(device: str, batch_tokens: int | None = None, hint: dict | None = None,
                   max_batch: int | None = None) -> Budget:
    """The token budget for ``device`` ("cpu", "cuda", "cuda:1", "mps").

    ``batch_tokens`` overrides the token figure. On cuda, ``hint`` (from the adapter's
    ``budget_hint()``: ``free_bytes`` and ``bytes_per_token``) gives
    ``tokens = CUDA_MEMORY_SHARE * free_bytes / bytes_per_token``, clamped to
    [2,048, 262,144]; this is a heuristic, and the executor halves any batch that still
    does not fit.
    """
    kind = device.split(":")[0]
    if kind == "cuda":
        tokens, cap = CUDA_FALLBACK_TOKENS, CUDA_MAX_BATCH
        if hint and hint.get("free_bytes") and hint.get("bytes_per_token"):
            est = int(CUDA_MEMORY_SHARE * hint["free_bytes"] / hint["bytes_per_token"])
            tokens = min(max(est, CUDA_MIN_TOKENS), CUDA_MAX_TOKENS)
    elif kind == "mps":
        tokens, cap = MPS_TOKENS, MPS_MAX_BATCH
    else:
        tokens, cap = CPU_TOKENS, CPU_MAX_BATCH
    return Budget(tokens=batch_tokens or tokens, max_batch=max_batch or cap)


def order(items: Sequence[T], length: Callable[[T], int]) -> list[T]:
    """Longest first; ties keep their input order, so the plan is deterministic."""
    return [items[i] for i in sorted(range(len(items)), key=lambda i: (-length(items[i]), i))]


def pack(items: Sequence[T], length: Callable[[T], int], budget: Budget) -> list[list[T]]:
    """Sort longest first, then cut into batches with ``len(batch) * longest <= tokens``.

    Because items arrive longest first, a batch's longest member is its first, and each
    batch grows until one more row would break the budget or ``max_batch``. An item
    longer than the whole budget still runs, alone.
    """
    batches: list[list[T]] = []
    current: list[T] = []
    longest = 0
    for item in order(items, length):
        n = length(item)
        if current and (len(current) >= budget.max_batch or (len(current) + 1) * max(longest, n) > budget.tokens):
            batches.append(current)
            current, longest = [], 0
        current.append(item)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


def pack_by_prefix(items: Sequence[T], length: Callable[[T], int], prefix: Callable[[T], tuple | None],
                   budget: Budget) -> list[list[T]]:
    """:func:`pack`, except that items sharing a prefix with another item go into the same batch.

    Those batches are for an adapter that forwards each distinct prefix once and the rest of
    each item on top of it, so their cost is ``prefixes * longest prefix + items * longest
    rest``, kept under ``budget.tokens``, and at most ``budget.max_batch`` items. A group that
    does not fit one batch is cut into chunks, each with its prefix. Items whose prefix no
    other item has (or None) are packed by :func:`pack` exactly as without this. The batches
    come longest first; ties keep the input order, so the plan is deterministic.
    """
    groups: dict[tuple, list[T]] = {}
    alone: list[T] = []
    for item in items:
        p = prefix(item)
        if p is None:
            alone.append(item)
        else:
            groups.setdefault(p, []).append(item)
    for p in [p for p, g in groups.items() if len(g) == 1]:
        alone.append(groups.pop(p)[0])
    rest = lambda x: length(x) - len(prefix(x) or ())  # noqa: E731
    chunks: list[tuple[int, list[T]]] = []  # (prefix length, items), each chunk one prefix
    for p, group in groups.items():
        group = order(group, rest)
        while group:
            n = 1
            while n < len(group) and n + 1 <= budget.max_batch and len(p) + (n + 1) * rest(group[0]) <= budget.tokens:
                n += 1
            chunks.append((len(p), group[:n]))
            group = group[n:]
    chunks = order(chunks, lambda c: c[0] + rest(c[1][0]))
    shared: list[list[T]] = []
    current: list[T] = []
    prefixes = widest = longest = 0
    for width, chunk in chunks:
        w, n = max(widest, width), max(longest, rest(chunk[0]))
        if current and (len(current) + len(chunk) > budget.max_batch or (prefixes + 1) * w + (len(current) + len(chunk)) * n > budget.tokens):
            shared.append(current)
            current, prefixes, w, n = [], 0, width, rest(chunk[0])
        current += chunk
        prefixes, widest, longest = prefixes + 1, w, n
    if current:
        shared.append(current)
    batches = pack(alone, length, budget) + shared
    return order(batches, lambda b: max(length(x) for x in b))


def halve(batch: Sequence[T]) -> list[list[T]]:
    """Split a batch that did not fit into two halves (the longer rows first)."""
    if len(batch) < 2:
        raise ValueError("cannot halve a batch of one")
    mid = (len(batch) + 1) // 2
    return [list(batch[:mid]), list(batch[mid:])]


def padded_tokens(batch: Sequence[T], length: Callable[[T], int]) -> int:
    """What a batch costs when every row is padded to the longest."""
    return len(batch) * max((length(x) for x in batch), default=0)
