"""The head every sequence of a batch shares (a chat template's system prompt and turn markers),
forwarded once: its keys and values computed from one row and repeated for every row, each row's
own rest on top. Token statistics' contexts (hf_prefix) and the decode loop's prefill groups
(hf_generation) use it; neither imports the other for it. Only the float summation order differs
from forwarding every row whole (docs/performance.md, "The head every sequence shares").
"""

from __future__ import annotations

from typing import Any, Sequence

# Heavy imports (torch) happen inside the functions that use them.


# A head shared by every sequence of a batch (a chat template's system prompt and turn markers)
# is forwarded once when it is at least this long: shorter, the extra forward call costs more
# than the tokens it saves.
MIN_SHARED_HEAD = 8


def shared_head(seqs: Sequence[Sequence[int]]) -> int:
    """How many leading ids every one of ``seqs`` (two or more) has in common, leaving each at
    least one id of its own; 0 when that is under MIN_SHARED_HEAD."""
    if len(seqs) < 2:
        return 0
    first, most = seqs[0], min(map(len, seqs)) - 1
    p = 0
    while p < most and all(s[p] == first[p] for s in seqs):
        p += 1
    return p if p >= MIN_SHARED_HEAD else 0


def head_layout(seqs: Sequence[Sequence[int]], p: int, pad: int) -> tuple[Any, Any]:
    """(ids, real) of ``seqs`` laid out as their shared head (``p`` columns, the same in every
    row), then each row's own rest left-padded: with ``p`` = 0, plain left padding. Position
    ids counted over a row's real tokens give each token the position it has unpadded."""
    import torch

    rest = max(len(s) for s in seqs) - p
    ids = torch.full((len(seqs), p + rest), pad, dtype=torch.long)
    real = torch.zeros((len(seqs), p + rest), dtype=torch.long)
    for k, s in enumerate(seqs):
        n = len(s) - p
        ids[k, :p], real[k, :p] = torch.tensor(s[:p], dtype=torch.long), 1
        ids[k, p + rest - n :], real[k, p + rest - n :] = torch.tensor(s[p:], dtype=torch.long), 1
    return ids, real


def forward_after_head(net: Any, ids: Any, mask: Any, pos: Any, p: int, cache: Any, cache_arg: str, **kw: Any) -> Any:
    """``net``'s output for columns ``p:`` of a :func:`head_layout` batch, every column's keys
    and values left in ``cache``: the head's ``p`` columns (the same ids, mask and positions in
    every row) forwarded once, from the first row, and repeated for every row; each row's rest
    on top. Only the float summation order differs from forwarding every row whole."""
    if p:
        net(input_ids=ids[:1, :p], attention_mask=mask[:1, :p], position_ids=pos[:1, :p], use_cache=True,
            **{cache_arg: cache}, **kw)
        n = ids.shape[0]
        for layer in cache.layers:
            keys, values = layer.keys.expand(n, -1, -1, -1), layer.values.expand(n, -1, -1, -1)
            if hasattr(layer, "hold"):  # hf_generation's growing layer keeps its own buffer
                layer.hold(keys, values)
            else:
                layer.keys, layer.values = keys, values
    return net(input_ids=ids[:, p:], attention_mask=mask, position_ids=pos[:, p:], use_cache=True,
               **{cache_arg: cache}, **kw)
