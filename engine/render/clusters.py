"""Which benchmark and which data split each node belongs to: the bands of the drawing.

A TOFU graph has 60-80 nodes; drawn flat it is a hairball. Grouping boxes by benchmark
and by split puts, in an unlearning graph, the forget-side work in one band and the
retain-side work in another, so a reader finds a metric by where it is. The split words
are the benchmarks' (``Benchmark.splits``: the unlearning benchmarks declare forget,
holdout and retain, TOFU adds its real authors and world facts); this module knows none,
so a drawing of another domain's graph is never banded by unlearning words. The split is a
*guess* from names, bound data resources and params; a node that mixes splits (model
utility, privleak, an MIA over forget and holdout) gets none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import networkx as nx

UNNAMED = re.compile(r"\[[0-9a-f]{6}\]$")  # the label the engine gives a node nobody named


@dataclass(frozen=True)
class Split:
    """A data split a benchmark's names and resources mention, and where its band goes.

    ``pattern`` (a regex on lower-case text; default: ``key`` anywhere) finds it in a
    name; ``rank`` orders the bands top to bottom. Nodes that mix splits (model
    utility, an MIA over forget and holdout) get none and sit at :data:`MIXED_RANK`, so
    splits ranked below it come first.
    """

    key: str
    title: str = ""
    pattern: str = ""
    rank: int = 50

    def search(self, text: str) -> re.Match | None:
        return re.search(self.pattern or re.escape(self.key), text)


_MODEL_LIKE = re.compile(r"model|tokenizer|embedding|vectors|logs")
_SPLIT_PARAM = re.compile(r"split|subset|data|source")
MIXED_RANK = 20


def split_vocabulary(groups: Iterable[Iterable[Split]] = ()) -> tuple[Split, ...]:
    """Every benchmark's splits in one vocabulary, ordered by rank (first definition of a key wins)."""
    out: dict[str, Split] = {}
    for group in groups:
        for s in group:
            out.setdefault(s.key, s)
    return tuple(sorted(out.values(), key=lambda s: (s.rank, s.key)))


def guess_split(text: str, splits: Sequence[Split] = ()) -> str | None:
    """The data split a name points at (``forget_Q_A_Prob`` -> forget).

    ``splits``: the run's benchmarks' (``split_vocabulary``); none, no guess. The earliest
    match wins, so with TOFU's splits ``retain_Truth_Ratio`` is retain although it contains
    "ra"-like letters.
    """
    text = text.lower()
    hits = [(m.start(), s.key) for s in splits for m in [s.search(text)] if m]
    return min(hits)[1] if hits else None


def is_model_like(name: str) -> bool:
    """Resources that are not a data split (``retain_model`` is the retain *model*)."""
    return bool(_MODEL_LIKE.search(name.lower()))


def _one(values: Iterable[Any]) -> Any:
    s = set(values)
    return s.pop() if len(s) == 1 else None


def _own_split(n: Any, unnamed: bool, splits: Sequence[Split]) -> str | None:
    if n.kind == "resource":
        return None if is_model_like(n.label) else guess_split(n.label, splits)
    if not unnamed:
        hit = _one(s for s in (guess_split(name.split("/")[-1], splits) for name in n.names) if s)
        if hit:
            return hit
    data = [guess_split(name, splits) for need, name in n.resources.items() if not is_model_like(need) and not is_model_like(name)]
    hit = _one(s for s in data if s)
    if hit:
        return hit
    texts = [str(v) for k, v in n.params.items() if _SPLIT_PARAM.search(k) and isinstance(v, str)]
    return _one(s for s in (guess_split(t, splits) for t in texts) if s)


def assign_clusters(view: Any) -> None:
    """Give each node a benchmark ``group`` and a data ``split`` (a guess; None = mixed).

    Named nodes keep their own group; unnamed intermediates and inputs take their
    children's group when all agree. A split comes from the node's names, then its
    bound data resources, then split-like params; unnamed nodes then take the split all
    their children agree on, and any node still without one takes its parents' common split.
    """
    g = view.to_nx()
    rank = {n.id: i for i, n in enumerate(view.nodes)}
    order = list(nx.lexicographical_topological_sort(g, key=rank.__getitem__))
    idx = view.index()
    unnamed = {n.id: n.kind == "resource" or bool(UNNAMED.search(n.label)) for n in view.nodes}
    for n in view.nodes:
        if not unnamed[n.id]:
            groups = {name.split("/", 1)[0] if "/" in name else n.group for name in n.names}
            n.group = _one(groups)
        n.split = _own_split(n, unnamed[n.id], view.splits)
    for i in reversed(order):
        n = idx[i]
        kids = [idx[c] for c in g.successors(i)]
        if unnamed[i] and kids:
            n.group = _one(k.group for k in kids)
            if n.split is None:
                n.split = _one(k.split for k in kids if k.split)
    for i in order:
        n = idx[i]
        parents = [idx[p] for p in g.predecessors(i)]
        if n.split is None and parents and n.kind != "resource" and all(p.split for p in parents):
            n.split = _one(p.split for p in parents)


def cluster_order(view: Any) -> list[tuple[str | None, str | None]]:
    """Bands top to bottom: shared first, then benchmarks as they appear; splits by rank."""
    groups: list[str | None] = []
    for n in view.nodes:
        if n.group not in groups:
            groups.append(n.group)
    first = {gr: i for i, gr in enumerate(groups)}
    groups = sorted(groups, key=lambda gr: (gr is not None, first[gr]))
    keys = {(n.group, n.split) for n in view.nodes}

    ranks = {s.key: s.rank for s in view.splits}

    def split_rank(s: str | None) -> tuple:
        return (MIXED_RANK if s is None else ranks.get(s, 1000), s or "")

    return [(gr, s) for gr in groups for s in sorted({s for g2, s in keys if g2 == gr}, key=split_rank)]


def split_title(split: str | None, splits: Sequence[Split] = ()) -> str:
    titles = {s.key: s.title for s in splits if s.title}
    return titles.get(split, split) if split else ""


def cluster_title(key: tuple[str | None, str | None], view: Any) -> str:
    group, split = key
    split_text = split_title(split, view.splits)
    if group is None:
        shared = any(n.group for n in view.nodes)
        return " · ".join(t for t in ("shared" if shared else None, split_text) if t)
    return " · ".join(t for t in (group, split_text) if t)
