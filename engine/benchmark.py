"""Benchmarks as plugins: the :class:`Benchmark` base class and the ``BENCHMARKS`` registry.

A benchmark is one object that knows its command-line options, turns them into its
typed :attr:`Benchmark.Config` (the one place an ``argparse.Namespace`` is read),
builds its graph and resources from that config, writes any extra output files and
draws its own report sections. The built-ins (toy, tofu, muse, weat) register through
the ``evaldag.benchmarks`` entry-point group exactly as a third party does::

    [project.entry-points."evaldag.benchmarks"]
    mybench = "my_package.bench:MyBenchmark"     # name = the CLI word: `evaldag run mybench`

A Python user builds the config and calls ``build`` directly::

    nodes, resources = TofuBenchmark().build(TofuConfig(data="TOFU/", model="ckpt/"))
"""

from __future__ import annotations

import argparse
import difflib
import os
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, ClassVar, Iterable, Sequence

import pydantic

from .declare import Node
from .render.clusters import Split, split_vocabulary
from .render.report_html import RunFolder, Section, load_run_folder
from .render.report_html import build_report_html as _build_page
from .render.report_html import write_report_html as _write_page

GROUP = "evaldag.benchmarks"


@dataclass(frozen=True)
class MetricMenu:
    """The metric names a benchmark accepts, exactly as ``--metrics`` takes them.

    ``--metrics`` also takes the words ``default``, ``all`` and each key of ``groups``.
    """

    default: tuple[str, ...]
    all: tuple[str, ...]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    case_sensitive: bool = True
    note: str = ""  # e.g. what the default means when it is not a fixed list

    def words(self) -> set[str]:
        """Every word ``--metrics`` accepts for this benchmark."""
        return {*self.all, "default", "all", *self.groups}

    def knows(self, word: str) -> bool:
        fold = (lambda s: s) if self.case_sensitive else str.lower
        return fold(word) in {fold(w) for w in self.words()}

    def parse(self, text: str | None, *, bench: str = "", strict: bool = True) -> tuple[str, ...]:
        """``"a,b,default,mia,all"`` -> metric names; an unknown name is an error when ``strict``.

        With several benchmarks in one run (``strict=False``) a name this benchmark does not
        know belongs to another one and is skipped here.
        """
        if not text:
            return self.default
        canon = {m if self.case_sensitive else m.lower(): m for m in self.all}
        names: list[str] = []
        for word in (x.strip() for x in text.split(",")):
            key = word if self.case_sensitive else word.lower()
            if key == "default":
                names += self.default
            elif key == "all":
                names += self.all
            elif key in self.groups:
                names += self.groups[key]
            elif key in canon:
                names.append(canon[key])
            elif word and strict:
                raise ValueError(f"unknown {bench} metric {word!r}; {did_you_mean(word, sorted(self.words()))}"
                                 f"known: {', '.join(sorted(self.all))}")
        return tuple(dict.fromkeys(names))


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """``"did you mean forget_quality? "`` for a near miss (a typo), else ``""``: said before the
    list of every name, which a user would otherwise scan for the one they meant."""
    close = difflib.get_close_matches(word, list(names), n=1)
    return f"did you mean {close[0]}? " if close else ""


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer > 0 (the flag and the value are named in the error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a whole number > 0, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"wants a whole number > 0, not {text!r}")
    return value


def fraction(text: str) -> float:
    """An argparse ``type``: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a number between 0 and 1, not {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"wants a number between 0 and 1, not {text!r}")
    return value


class Benchmark:
    """Subclass this; register the subclass under the ``evaldag.benchmarks`` entry-point group.

    Class attributes: ``name`` (the CLI word), ``group`` (node group and the prefix of
    ``<GROUP>_EVAL.json``), ``description`` (one line for ``evaldag list``), ``Config``
    (a pydantic model: everything the benchmark reads) and ``metadata`` (e.g. a licence).
    """

    name: ClassVar[str] = ""
    group: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type[pydantic.BaseModel]] = pydantic.BaseModel
    metadata: ClassVar[dict] = {}
    #: data splits its names mention beyond forget / holdout / retain (bands of the graph drawing)
    splits: ClassVar[tuple[Split, ...]] = ()
    #: resource -> the flag that supplies it (the hint when a graph misses that resource)
    resource_flags: ClassVar[dict[str, str]] = {}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this benchmark's own options (the CLI adds --out, --cache-dir, --metrics, ...)."""

    def config_from_args(self, args: argparse.Namespace) -> pydantic.BaseModel:
        """The only place a Namespace is read. Default: every Config field of the same name."""
        return self.Config(**{k: getattr(args, k) for k in self.Config.model_fields if getattr(args, k, None) is not None})

    def metric_menu(self) -> MetricMenu:
        return MetricMenu(default=(), all=())

    def plan(self, config: Any) -> list[Node]:
        """The nodes alone: no data read, no model loaded (``evaldag graph``)."""
        return self.build(config)[0]

    def build(self, config: Any) -> tuple[list[Node], dict[str, Any]]:  # pragma: no cover - abstract
        """The nodes and the (lazy) resources they read."""
        raise NotImplementedError

    def write_outputs(self, result: Any, out_dir: str | os.PathLike, config: Any) -> list[Path]:
        """Extra files next to the engine's ``<GROUP>_EVAL.json`` / ``_SUMMARY.json`` / ``run.json``."""
        return []

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        """Sections of ``report.html`` drawn from the loaded run folders (default: none)."""
        return []

    def input_paths(self, config: Any) -> list[tuple[str, Path]]:
        """(option, path) for each file or folder the run reads, so that ``--out`` can never
        be, hold or lie inside one (retain logs cannot be rebuilt). Default: every config
        field whose value (or item) names an existing path; override to add hidden ones."""
        found: list[tuple[str, Path]] = []

        def walk(key: str, v: Any) -> None:
            if isinstance(v, dict):
                for k, item in v.items():
                    walk(str(k), item)
            elif isinstance(v, (list, tuple)):
                for item in v:
                    walk(key, item)
            elif isinstance(v, (str, os.PathLike)) and str(v) and os.path.exists(os.path.expanduser(v)):
                found.append((f"--{key.replace('_', '-')}", Path(os.path.expanduser(v))))

        walk("", config.model_dump() if isinstance(config, pydantic.BaseModel) else {})
        return found

    # helpers for subclasses
    @staticmethod
    def several(args: argparse.Namespace) -> bool:
        """True when one command line runs several benchmarks (``--metrics`` then names theirs too)."""
        return len(getattr(args, "benchmarks", None) or []) > 1

    def metrics_from_args(self, args: argparse.Namespace) -> tuple[str, ...]:
        return self.metric_menu().parse(getattr(args, "metrics", None), bench=self.group or self.name,
                                         strict=not self.several(args))


class BenchmarkRegistry:
    """CLI word -> benchmark, from the ``evaldag.benchmarks`` entry points (loaded on demand).

    Only the benchmarks a command names are imported, so ``evaldag run toy`` never
    imports TOFU's data loaders.
    """

    def __init__(self) -> None:
        self._added: dict[str, type[Benchmark]] = {}
        self._made: dict[str, Benchmark] = {}

    def _entry_points(self) -> dict[str, EntryPoint]:
        return {ep.name: ep for ep in entry_points(group=GROUP)}

    def add(self, cls: type[Benchmark], name: str | None = None) -> type[Benchmark]:
        """Register a class by hand (tests, notebooks); entry points are the usual way."""
        self._added[name or cls.name] = cls
        self._made.pop(name or cls.name, None)
        return cls

    def remove(self, name: str) -> None:
        self._added.pop(name, None)
        self._made.pop(name, None)

    def names(self) -> list[str]:
        return sorted({*self._entry_points(), *self._added})

    def __contains__(self, name: str) -> bool:
        return name in self._added or name in self._entry_points()

    def get(self, name: str) -> Benchmark:
        if name not in self._made:
            cls = self._added.get(name)
            if cls is None:
                eps = self._entry_points()
                if name not in eps:
                    raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(self.names())}")
                cls = eps[name].load()
            if not (isinstance(cls, type) and issubclass(cls, Benchmark)):
                raise TypeError(f"benchmark entry point {name!r} is {cls!r}, not a Benchmark subclass")
            self._made[name] = cls()
        return self._made[name]

    def by_group(self, group: str) -> Benchmark | None:
        """The benchmark whose ``group`` is ``group`` (a run folder without run.json)."""
        for name in self.names():
            try:
                bench = self.get(name)
            except Exception:  # a broken third-party plugin must not hide the others' sections
                continue
            if bench.group.upper() == group.upper():
                return bench
        return None


BENCHMARKS = BenchmarkRegistry()


# ---------------------------------------------------------------------- the report
def benchmarks_of(runs: Iterable[RunFolder], registry: BenchmarkRegistry = BENCHMARKS) -> list[Benchmark]:
    """The benchmarks whose results the run folders hold: run.json's ``benchmarks``, else the
    ``<GROUP>_EVAL.json`` files (folders written by open-unlearning or an older evaldag)."""
    found: dict[str, Benchmark] = {}
    for r in runs:
        names = (r.run or {}).get("benchmarks")
        if isinstance(names, list):
            for n in names:
                if isinstance(n, str) and n in registry:
                    found.setdefault(n, registry.get(n))
            continue
        for group in list(r.evals) + list(r.summaries):
            bench = registry.by_group(group)
            if bench is not None:
                found.setdefault(bench.name, bench)
    return list(found.values())


def splits_of(benchmarks: Iterable[Benchmark]) -> tuple[Split, ...]:
    """The generic data splits plus the benchmarks' own (the bands of a graph drawing)."""
    return split_vocabulary(b.splits for b in benchmarks)


def build_report_html(out_dirs: Sequence[str | os.PathLike], title: str = "evaldag report", *,
                      registry: BenchmarkRegistry = BENCHMARKS) -> str:
    """The report page for finished runs, with the sections of the benchmarks they ran."""
    return _build_page(out_dirs, title, plugins=lambda runs: benchmarks_of(runs, registry))


def write_report_html(out_dirs: Sequence[str | os.PathLike], dest: str | os.PathLike, *,
                      title: str = "evaldag report", registry: BenchmarkRegistry = BENCHMARKS,
                      shown: Sequence[str | os.PathLike] | None = None) -> Path:
    """``report.html`` for finished runs, with the sections of the benchmarks they ran
    (``shown``: the folder names titles use, when the files are read from a stage)."""
    return _write_page(out_dirs, dest, title=title, plugins=lambda runs: benchmarks_of(runs, registry), shown=shown)


__all__ = ["BENCHMARKS", "Benchmark", "BenchmarkRegistry", "MetricMenu", "RunFolder", "Section", "Split",
           "benchmarks_of", "build_report_html", "fraction", "load_run_folder", "positive_int", "splits_of",
           "write_report_html"]
