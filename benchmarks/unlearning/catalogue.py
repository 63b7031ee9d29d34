"""What the TOFU and MUSE specs share: named nodes built once, on demand, and the retain side."""

from __future__ import annotations

from typing import Callable

from ...engine import Node
from ...engine.render.interval_cells import INTERVALS  # the interval nodes' group: <GROUP>_INTERVALS, files of their own
from ...metrics.unlearning.blind_mia import mia_blind_baseline
from ...metrics.unlearning.intervals import interval_kind_for, interval_node
from ...metrics.unlearning.retain_logs import from_logs
from ...metrics.unlearning.utility import MODEL_UTILITY_PARTS



def request_kinds(node: Node) -> set[str]:
    """Every request kind ``node`` and its parents declare (what running it asks of a model)."""
    kinds = {kind for per_resource in node.metric.requests.values() for kind in per_resource}
    for parent in node.resolved_parents().values():
        if isinstance(parent, Node):
            kinds |= request_kinds(parent)
    return kinds


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
    #: the generation metric each prompt transform repeats on its derived split, as ``<metric>_<transform>``
    TRANSFORMED_METRIC = ""

    def __init__(self, cfg):
        self.cfg = cfg
        self.made: dict[str, Node] = {}
        self.recipes: dict[str, Callable[[], Node]] = {}
        self._declare()

    def _declare(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __getitem__(self, name: str) -> Node:
        if name not in self.made:
            if name not in self.recipes:
                raise KeyError(f"{self.GROUP} has no metric {name!r}; known: {', '.join(sorted(self.recipes))}")
            self.made[name] = self.recipes[name]().named(name, self.GROUP)
        return self.made[name]

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
        """The rule that brackets ``name`` from its items (None: it has none)."""
        return interval_kind_for(name, self.ROUGE_FIELD) if name in self.recipes else None

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

    def transformed_names(self) -> list[str]:
        """``<TRANSFORMED_METRIC>_<name>`` for each of the config's prompt transforms."""
        return [f"{self.TRANSFORMED_METRIC}_{t}" for t in getattr(self.cfg, "prompt_transforms", ())]

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
        metrics = list(metrics) + [m for m in cat.transformed_names() if m not in metrics]
        nodes = [cat[m] for m in metrics]
        if getattr(cfg, "mia_blind_baseline", False):
            nodes.append(cat.blind_baseline(metrics))
        if getattr(cfg, "bootstrap_resamples", 0):
            nodes += [n for n in (cat.interval(m) for m in metrics) if n is not None]
        return nodes

