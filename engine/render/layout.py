"""A layered, left-to-right layout for metric graphs, written for readability at 60-80 nodes.

Why our own layout and not Graphviz: the report must render on machines with no system
binaries and no network, and the output must be byte-for-byte deterministic so that
tests (and diffs of reports) are stable. The method is the classic layered one:

1. **Layers.** ``networkx.topological_generations`` gives each node its longest-path
   depth, so every edge points to a later layer. Sources (scorers, inputs) are then
   pulled right next to their first consumer so inputs do not trail long edges.
2. **Dummy nodes.** An edge spanning several layers gets one dummy per layer crossed,
   so it is routed around boxes and takes part in crossing reduction.
3. **Order within layers.** Nodes stay grouped by *band* (benchmark + split); inside a
   band, alternating down/up barycentre sweeps then adjacent swaps (transpose) cut
   edge crossings. The best ordering seen is kept.
4. **Coordinates.** Columns are as wide as their widest box. Bands are stacked
   vertically, each as tall as its fullest column. Inside a band a node is placed as
   close as possible to the mean height of its neighbours while keeping order and
   spacing (an isotonic regression, solved by pool-adjacent-violators).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import networkx as nx

Point = tuple[float, float]


@dataclass(frozen=True)
class Dummy:
    """A bend point of the edge ``src -> dst`` in the layer it crosses."""

    src: Any
    dst: Any
    step: int


@dataclass
class Band:
    key: Any
    y0: float
    y1: float


@dataclass
class Layout:
    layer: dict  # real node -> layer index
    layers: list[list]  # per layer, real nodes and Dummy bend points, top to bottom
    pos: dict  # node or Dummy -> centre (x, y)
    size: dict  # node -> (w, h)
    routes: dict  # (src, dst) -> polyline points from src's right side to dst's left side
    bands: list[Band] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0
    crossings: int = 0


def assign_layers(g: nx.DiGraph) -> dict:
    """Longest-path layers with sources pulled right and empty layers removed."""
    layer = {}
    for i, gen in enumerate(nx.topological_generations(g)):
        for n in gen:
            layer[n] = i
    for n in g.nodes:
        if g.in_degree(n) == 0 and g.out_degree(n) > 0:
            layer[n] = min(layer[c] for c in g.successors(n)) - 1
    used = {v: i for i, v in enumerate(sorted(set(layer.values())))}
    return {n: used[layer[n]] for n in g.nodes}


def count_crossings(layers: list[list], edges: list[tuple]) -> int:
    """Edge crossings between adjacent layers (edges given between adjacent layers)."""
    pos = {n: i for lay in layers for i, n in enumerate(lay)}
    where = {n: li for li, lay in enumerate(layers) for n in lay}
    by_gap: dict[int, list[tuple[int, int]]] = {}
    for u, v in edges:
        by_gap.setdefault(min(where[u], where[v]), []).append((pos[u], pos[v]) if where[u] < where[v] else (pos[v], pos[u]))
    total = 0
    for segs in by_gap.values():
        for i in range(len(segs)):
            a, b = segs[i]
            for c, d in segs[i + 1 :]:
                if (a - c) * (b - d) < 0:
                    total += 1
    return total


def _split_long_edges(g: nx.DiGraph, layer: dict) -> tuple[dict, list[tuple], dict]:
    """Chains of dummies for long edges: returns layer of every point, short edges, chains."""
    where = dict(layer)
    short, chains = [], {}
    for u, v in g.edges:
        chain = [u]
        for step in range(1, layer[v] - layer[u]):
            d = Dummy(u, v, step)
            where[d] = layer[u] + step
            chain.append(d)
        chain.append(v)
        chains[(u, v)] = chain
        short += list(zip(chain, chain[1:]))
    return where, short, chains


class _Orderer:
    """Barycentre sweeps plus transpose, within bands; remembers the best ordering."""

    def __init__(self, layers: list[list], edges: list[tuple], brank: dict):
        self.layers, self.edges, self.brank = layers, edges, brank
        self.up: dict = {n: [] for lay in layers for n in lay}
        self.down: dict = {n: [] for lay in layers for n in lay}
        for u, v in edges:
            self.down[u].append(v)
            self.up[v].append(u)
        self._index()

    def _index(self) -> None:
        self.pos = {n: i for lay in self.layers for i, n in enumerate(lay)}

    def sweep(self, downward: bool) -> None:
        rng = range(1, len(self.layers)) if downward else range(len(self.layers) - 2, -1, -1)
        neigh = self.up if downward else self.down
        for li in rng:
            lay = self.layers[li]
            keyed = {n: (self.brank[n], self._bary(neigh[n], n), self.pos[n]) for n in lay}
            self.layers[li] = sorted(lay, key=keyed.__getitem__)
            self.pos.update((n, i) for i, n in enumerate(self.layers[li]))  # only this layer moved: linear, not layers x nodes

    def _bary(self, ns: list, n: Any) -> float:
        """Mean position of the neighbours; a node without any keeps its place."""
        return sum(self.pos[m] for m in ns) / len(ns) if ns else float(self.pos[n])

    def _pair_cost(self, a: Any, b: Any) -> int:
        cost = 0
        for neigh in (self.up, self.down):
            for x in neigh[a]:
                for y in neigh[b]:
                    cost += self.pos[x] > self.pos[y]
        return cost

    def transpose(self) -> None:
        for _ in range(8):
            improved = False
            for lay in self.layers:
                for j in range(len(lay) - 1):
                    a, b = lay[j], lay[j + 1]
                    if self.brank[a] == self.brank[b] and self._pair_cost(b, a) < self._pair_cost(a, b):
                        lay[j], lay[j + 1] = b, a
                        self.pos[a], self.pos[b] = j + 1, j
                        improved = True
            if not improved:
                return

    def run(self, sweeps: int) -> int:
        best = [list(lay) for lay in self.layers]
        best_c = count_crossings(self.layers, self.edges)
        for i in range(sweeps):
            self.sweep(downward=(i % 2 == 0))
            self.transpose()
            c = count_crossings(self.layers, self.edges)
            if c < best_c:
                best, best_c = [list(lay) for lay in self.layers], c
        self.layers[:] = best
        self._index()
        return best_c


def _pav_place(desired: list[float], heights: list[float], gaps: list[float], lo: float, hi: float) -> list[float]:
    """Centres closest (least squares) to ``desired`` keeping order, spacing and bounds."""
    offsets = [0.0]
    for i in range(1, len(desired)):
        offsets.append(offsets[-1] + (heights[i - 1] + heights[i]) / 2 + gaps[i])
    blocks: list[list[float]] = []  # [sum, count]
    for d, off in zip(desired, offsets):
        blocks.append([d - off, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    z = [s / c for s, c in blocks for _ in range(int(c))]
    zlo, zhi = lo + heights[0] / 2, hi - heights[-1] / 2 - offsets[-1]
    return [max(min(v, zhi), zlo) + off for v, off in zip(z, offsets)]


def layout(
    g: nx.DiGraph,
    *,
    band: Callable[[Hashable], Any] | None = None,
    band_order: list | None = None,
    size: Callable[[Hashable], tuple[float, float]] | None = None,
    sweeps: int = 8,
    layer_gap: float = 72.0,
    node_gap: float = 12.0,
    band_gap: float = 14.0,
    band_pad: tuple[float, float] = (26.0, 10.0),
    margin: float = 12.0,
) -> Layout:
    """Lay ``g`` out left to right. ``sweeps=0`` keeps the input order (a naive baseline)."""
    band = band or (lambda n: None)
    size = size or (lambda n: (120.0, 36.0))
    rank = {n: i for i, n in enumerate(g.nodes)}
    layer = assign_layers(g)
    where, short, chains = _split_long_edges(g, layer)
    keys = band_order or sorted({band(n) for n in g.nodes}, key=repr)
    krank = {k: i for i, k in enumerate(keys)}
    brank = {n: krank[band(n)] for n in g.nodes}
    brank.update({d: krank[band(d.dst)] for d in where if isinstance(d, Dummy)})

    def first(n: Any) -> tuple:
        return (brank[n], rank[n], 0) if not isinstance(n, Dummy) else (brank[n], rank[n.src], rank[n.dst] + 0.5)

    layers: list[list] = [[] for _ in range(max(where.values(), default=-1) + 1)]
    for n in sorted(where, key=first):
        layers[where[n]].append(n)
    orderer = _Orderer(layers, short, brank)
    crossings = orderer.run(sweeps)

    sizes = {n: size(n) for n in g.nodes}
    sizes.update({d: (0.0, 4.0) for d in where if isinstance(d, Dummy)})
    col_w = [max([sizes[n][0] for n in lay if not isinstance(n, Dummy)], default=40.0) for lay in layers]
    col_x, x = [], margin
    for w in col_w:
        col_x.append(x)
        x += w + layer_gap
    width = x - layer_gap + margin

    def gap(a: Any, b: Any) -> float:
        return node_gap if not isinstance(a, Dummy) and not isinstance(b, Dummy) else 5.0

    segs: dict[tuple[int, int], list] = {}
    for li, lay in enumerate(layers):
        for n in lay:
            segs.setdefault((li, brank[n]), []).append(n)
    need = {}
    for (li, b), ns in segs.items():
        h = sum(sizes[n][1] for n in ns) + sum(gap(a, c) for a, c in zip(ns, ns[1:]))
        need[b] = max(need.get(b, 0.0), h)
    bands, y = [], margin
    for k in keys:
        if krank[k] not in need:
            continue
        h = need[krank[k]] + band_pad[0] + band_pad[1]
        bands.append(Band(k, y, y + h))
        y += h + band_gap
    height = y - band_gap + margin
    bounds = {krank[b.key]: (b.y0 + band_pad[0], b.y1 - band_pad[1]) for b in bands}

    ys: dict = {}
    for (li, b), ns in segs.items():  # start stacked from the band's top
        top = bounds[b][0]
        for a, c in zip([None] + ns, ns):
            top += (gap(a, c) if a is not None else 0.0) + sizes[c][1]
            ys[c] = top - sizes[c][1] / 2
    up, down = orderer.up, orderer.down
    for it in range(6):
        order = range(len(layers)) if it % 2 == 0 else range(len(layers) - 1, -1, -1)
        for li in order:
            for b in sorted({brank[n] for n in layers[li]}):
                ns = segs[(li, b)]
                desired = []
                for n in ns:
                    nb = up[n] + down[n] if it >= 4 else (up[n] if it % 2 == 0 else down[n])
                    desired.append(sum(ys[m] for m in nb) / len(nb) if nb else ys[n])
                placed = _pav_place(desired, [sizes[n][1] for n in ns], [0.0] + [gap(a, c) for a, c in zip(ns, ns[1:])], *bounds[b])
                ys.update(zip(ns, placed))

    pos = {}
    for li, lay in enumerate(layers):
        for n in lay:
            pos[n] = (round(col_x[li] + col_w[li] / 2, 1), round(ys[n], 1))
    routes = {}
    for (u, v), chain in chains.items():
        pts: list[Point] = [(round(pos[u][0] + sizes[u][0] / 2, 1), pos[u][1])]
        for d in chain[1:-1]:
            li = where[d]
            pts += [(round(col_x[li], 1), pos[d][1]), (round(col_x[li] + col_w[li], 1), pos[d][1])]
        pts.append((round(pos[v][0] - sizes[v][0] / 2, 1), pos[v][1]))
        routes[(u, v)] = pts
    return Layout(dict(layer), layers, pos, sizes, routes, bands, round(width, 1), round(height, 1), crossings)
