"""What the TOFU and MUSE specs share: named nodes built once, on demand, and the retain side."""

from __future__ import annotations

from typing import Callable

from ...engine import Node
from ...engine.render.interval_cells import INTERVALS  # the interval nodes' group: <GROUP>_INTERVALS, files of their own
from ...metrics.unlearning.blind_mia import mia_blind_baseline
from ...metrics.unlearning.intervals import interval_kind_for, interval_node
from ...metrics.unlearning.retain_logs import from_logs
from ...metrics.unlearning.utility import MODEL_UTILITY_PARTS
from ..prompt_transforms import resource_name, split_spec

#: what a generation metric asks of models: generations, and at most a classifier reading them (gibberish)
GENERATION_KINDS = frozenset({"generate", "classify_text"})


def request_kinds(node: Node) -> set[str]:
    """Every request kind ``node`` and its parents declare (what running it asks of a model)."""
    kinds = {kind for per_resource in node.metric.requests.values() for kind in per_resource}
    for parent in node.resolved_parents().values():
        if isinstance(parent, Node):
            kinds |= request_kinds(parent)
    return kinds


def data_read(node: Node) -> set[str]:
    """Every ``data`` resource ``node`` and its parents read."""
    out = {node.bind["data"]} if "data" in node.bind else set()
    for parent in node.resolved_parents().values():
        if isinstance(parent, Node):
            out |= data_read(parent)
    return out


class Catalogue:
    """Name -> recipe; each named node is built once so shared parents are shared instances.

    Subclasses fill ``self.recipes`` in ``_declare``. ``GROUP`` is the benchmark's name
    (the prefix of its ``<GROUP>_EVAL.json``); ``retain`` says where forget quality and
    privleak find the retain model's values: ``"model"`` (the same node bound to
    ``retain_model``), ``"logs"`` (read from ``<group>_retain_logs``) or ``"none"``.
    """

    GROUP = ""
    ROUGE_FIELD = "rougeL_recall"  # the ROUGE field each ROUGE metric's agg_value is the mean of
    #: the MIAs' member and non-member rows (resources) and the text each row's attack scores
    MIA_ROWS: tuple[str, str, str] = ("", "", "")
    #: the splits a prompt transform may rewrite (rows with a question): the name ``--prompt-transform
    #: NAME:SPLIT`` takes -> the resource
    QUESTION_SPLITS: dict[str, str] = {}

    def __init__(self, cfg):
        self.cfg = cfg
        self.made: dict[str, Node] = {}
        self.recipes: dict[str, Callable[[], Node]] = {}
        self._declare()
        #: transform name -> {question split's resource: its derived copy's}
        self.transforms: dict[str, dict[str, str]] = {}
        for entry in getattr(cfg, "prompt_transforms", ()):
            name, splits = split_spec(entry)
            for split in splits or ():
                if split not in self.QUESTION_SPLITS:
                    raise ValueError(f"--prompt-transform {entry}: {self.GROUP} has no question split {split!r}; "
                                     f"known: {', '.join(self.QUESTION_SPLITS)}")
            chosen = [self.QUESTION_SPLITS[s] for s in splits] if splits else list(self.QUESTION_SPLITS.values())
            self.transforms[name] = {r: resource_name(r, name) for r in chosen}

    def _declare(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __getitem__(self, name: str) -> Node:
        if name not in self.made:
            recipe = self.recipes.get(name) or self._transformed_recipe(name)
            if recipe is None:
                raise KeyError(f"{self.GROUP} has no metric {name!r}; known: {', '.join(sorted(self.recipes))}")
            self.made[name] = recipe().named(name, self.GROUP)
        return self.made[name]

    # ------------------------------------------------------------ prompt transforms
    def is_generation(self, name: str) -> bool:
        """``name`` asks models for generations and nothing but (a classifier reading them aside)."""
        kinds = request_kinds(self[name])
        return "generate" in kinds and kinds <= GENERATION_KINDS

    def repeats(self, name: str, transform: str) -> bool:
        """Whether ``transform`` repeats ``name``: a generation metric reading only question splits, one of
        them one the transform is given for."""
        if name not in self.recipes or not self.is_generation(name):
            return False
        reads = data_read(self[name])
        return reads <= set(self.QUESTION_SPLITS.values()) and bool(reads & self.transforms[transform].keys())

    def parent_of(self, name: str) -> str | None:
        """``<metric>_<transform>`` -> ``<metric>`` when the transform repeats that metric (None otherwise)."""
        for t in self.transforms:
            if name.endswith("_" + t) and self.repeats(name[: -len(t) - 1], t):
                return name[: -len(t) - 1]
        return None

    def _transformed_recipe(self, name: str) -> Callable[[], Node] | None:
        base = self.parent_of(name)
        if base is None:
            return None
        t = name[len(base) + 1:]
        return lambda: self._rebound(self[base], t, top=True)

    def _rebound(self, node: Node, t: str, top: bool = False) -> Node:
        """``node`` reading the transform's derived splits where it read their originals; the parts that
        read none are the same nodes (so the same cached values), a named metric among its parents is
        that metric's own transformed node."""
        derived = self.transforms[t]
        if not data_read(node) & derived.keys():
            return node
        if not top and node.name in self.recipes and node.group == self.GROUP:
            return self[f"{node.name}_{t}"]
        parents = {k: self._rebound(p, t) if isinstance(p, Node) else p for k, p in node.resolved_parents().items()}
        bind = {k: derived.get(v, v) if k == "data" else v for k, v in node.bind.items()}
        return Node(node.metric, node.params, parents, bind)

    def transformed_names(self, metrics) -> list[str]:
        """``<metric>_<transform>`` for each selected metric each of the config's transforms repeats; a
        transform that repeats none of them is an error naming those it could."""
        out = []
        for t, derived in self.transforms.items():
            mine = [f"{m}_{t}" for m in metrics if self.repeats(m, t)]
            if not mine:
                could = [m for m in self.names() if self.repeats(m, t)]
                splits = ", ".join(k for k, r in self.QUESTION_SPLITS.items() if r in derived)
                raise ValueError(f"--prompt-transform {self._entry(t)}: the run selects no generation metric on {splits} "
                                 f"that it could repeat ({', '.join(could)})")
            out += mine
        return out

    def not_repeated(self, metrics) -> list[tuple[str, str, list[str]]]:
        """(transform entry, metric, its splits that are not questions) for each selected generation metric
        a transform cannot rewrite (MUSE's verbmem: a passage to continue)."""
        out = []
        for t in self.transforms:
            for m in metrics:
                if m in self.recipes and self.is_generation(m):
                    other = sorted(data_read(self[m]) - set(self.QUESTION_SPLITS.values()))
                    if other:
                        out.append((self._entry(t), m, other))
        return out

    def _entry(self, t: str) -> str:
        """The transform as the command line gave it (``NAME`` or ``NAME:SPLIT+SPLIT``)."""
        return next(e for e in getattr(self.cfg, "prompt_transforms", ()) if split_spec(e)[0] == t)

    def retain_side(self, name: str) -> dict[str, Node]:
        """The retain side of ``name`` as an extra ``retain`` parent, or nothing.

        The same node bound to ``retain_model``, or its value read from retain logs. (Not
        ``reference_model``: that is the MIA attacks' reference, another resource.)
        """
        if self.cfg.retain == "model":
            node = self[name]
            return {"retain": Node(node.metric, node.params, node.parents, {**node.bind, "model": "retain_model"})}
        if self.cfg.retain == "logs":
            return {"retain": from_logs(key=name, bind={"retain_logs": f"{self.GROUP.lower()}_retain_logs"})}
        return {}

    def names(self) -> list[str]:
        return sorted(self.recipes)

    def needing_only(self, kinds: set[str]) -> tuple[str, ...]:
        """The metrics whose whole closure asks the model for nothing but ``kinds`` (from each
        scorer's declared requests, so a new metric joins its group by declaring what it asks)."""
        return tuple(n for n in self.names() if request_kinds(self[n]) <= kinds)

    def interval_kind(self, name: str) -> str | None:
        """The rule that brackets ``name`` from its items (None: it has none); a metric repeated on a
        prompt transform's set (``<metric>_<transform>``) is bracketed by its parent's rule."""
        base = name if name in self.recipes else self.parent_of(name)
        return interval_kind_for(base, self.ROUGE_FIELD) if base is not None else None

    def interval(self, name: str) -> Node | None:
        """The bootstrap interval of ``name``, over the same parents (so the same cached values)."""
        kind, c = self.interval_kind(name), self.cfg
        if kind is None:
            return None
        if kind == "ks":
            parents = {"forget": self["forget_truth_ratio"], **self.retain_side("forget_truth_ratio")}
        elif kind == "privleak":
            parents = {"forget": self["mia_min_k"], **self.retain_side("mia_min_k")}
        elif kind == "hmean":
            parents = {p: self[p] for p in MODEL_UTILITY_PARTS}
        else:
            parents = {"metric": self[name]}
        return interval_node(kind=kind, n_resamples=c.bootstrap_resamples, seed=c.seed, confidence_level=c.confidence_level,
                             parents=parents).named(name, self.GROUP + INTERVALS)

    def blind_baseline(self, metrics) -> Node:
        """``mia_blind_baseline`` on the MIAs' own rows, each MIA of ``metrics`` a parent (its AUC beside)."""
        members, nonmembers, key = self.MIA_ROWS
        return mia_blind_baseline(text_key=key, seed=self.cfg.seed, parents={m: self[m] for m in metrics if m.startswith("mia_")},
                                  bind={"members": members, "nonmembers": nonmembers}).named("mia_blind_baseline", self.GROUP)

    @classmethod
    def build(cls, metrics, cfg) -> list[Node]:
        """The named metrics (with ``mia_blind_baseline`` the blind baseline beside the MIAs), then (with
        ``bootstrap_resamples``) each one's interval in ``<GROUP>_INTERVALS``."""
        cat = cls(cfg)
        metrics = list(metrics) + [m for m in cat.transformed_names(metrics) if m not in metrics]
        nodes = [cat[m] for m in metrics]
        if getattr(cfg, "mia_blind_baseline", False):
            nodes.append(cat.blind_baseline(metrics))
        if getattr(cfg, "bootstrap_resamples", 0):
            nodes += [n for n in (cat.interval(m) for m in metrics) if n is not None]
        return nodes

