"""The benchmark registry: CLI word -> :class:`~evaldag.engine.benchmark.Benchmark`, from the
``evaldag.benchmarks`` entry points, loaded on demand.

Built-ins register exactly as a third party does::

    [project.entry-points."evaldag.benchmarks"]
    mybench = "my_package.bench:MyBenchmark"     # name = the CLI word: `evaldag run mybench`

A command that runs a benchmark (``evaldag demo`` runs TOFU) asks ``BENCHMARKS.get(name)``
rather than importing the plugin's modules.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from .benchmark import Benchmark

GROUP = "evaldag.benchmarks"


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
