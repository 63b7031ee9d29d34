"""``Probe``: GenderBench's probe lifecycle, deterministic and without global state.

A subclass sets ``mark_definitions``, builds its evaluator and metric calculator in
``__init__`` and implements ``_create_probe_items()``. The four GenderBench steps are
kept (``create_probe_items``, ``generate(generator)``, ``evaluate``,
``calculate_metrics``; ``run`` does all four), so a custom GenderBench probe ports by
changing its imports. In evaldag's graph each step is a cached node
(:mod:`evaldag.benchmarks.probes`); this class is what those nodes call.

Differences from GenderBench 1.1.0, all on purpose: randomness comes from private
``random.Random(random_seed)`` instances (same draws as GenderBench's global
``random.seed``), there are no UUIDs or log files, ``metrics`` keeps the point values
and ``intervals`` the bootstrap intervals side by side, and an evaluator that raises is
an error that names the probe, item, prompt and repetition.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterator, Optional, Sequence

from .bootstrap import BootstrapMode, bootstrap_intervals
from .items import Attempt, ProbeItem
from .marks import MarkDefinition


class ProbeError(ValueError):
    """Bad input for a probe: names the probe and, where it applies, item/prompt/attempt."""


class Probe:
    mark_definitions: list[MarkDefinition] = []
    #: data files the probe reads, in GenderBench's resources/ layout (their digest keys the items)
    data_files: tuple[str, ...] = ()

    def __init__(
        self,
        evaluator: Any,
        metric_calculator: Any,
        num_repetitions: int = 1,
        sample_k: Optional[int] = None,
        calculate_cis: bool = True,
        bootstrap_cycles: int = 1000,
        bootstrap_alpha: float = 0.95,
        random_seed: int = 123,
        bootstrap_mode: BootstrapMode = "genderbench",
        **_ignored: Any,  # GenderBench's log_strategy / log_dir: there are no probe logs here
    ):
        if num_repetitions < 1:
            raise ProbeError(f"{type(self).__name__}: num_repetitions must be >= 1, got {num_repetitions}")
        if sample_k is not None and sample_k < 1:
            raise ProbeError(f"{type(self).__name__}: sample_k must be >= 1, got {sample_k}")
        self.evaluator = evaluator
        self.metric_calculator = metric_calculator
        self.num_repetitions = num_repetitions
        self.sample_k = sample_k
        self.calculate_cis = calculate_cis
        self.bootstrap_cycles = bootstrap_cycles
        self.bootstrap_alpha = bootstrap_alpha
        self.random_seed = random_seed
        self.bootstrap_mode = bootstrap_mode
        self.probe_items: list[ProbeItem] = []
        self.metrics: dict[str, Any] = {}
        self.intervals: dict[str, tuple[float, float]] = {}
        self.marks: dict[str, dict] = {}

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def attempts(self) -> Iterator[Attempt]:
        for item in self.probe_items:
            yield from item.attempts

    # -- 1. items
    def create_probe_items(self) -> list[ProbeItem]:
        self.create_probe_items_random_generator = random.Random(self.random_seed)
        items = self._create_probe_items()
        self.probe_items = items
        if self.sample_k is not None:
            self.probe_items = self.sample(self.sample_k)
        return self.probe_items

    def _create_probe_items(self) -> list[ProbeItem]:
        raise NotImplementedError(f"{self.name} must implement _create_probe_items()")

    def sample(self, k: int) -> list[ProbeItem]:
        """``k`` items drawn as GenderBench's ``random.seed(seed); random.sample(items, k)``."""
        if k > len(self.probe_items):
            raise ProbeError(f"{self.name}: sample_k={k} but the probe has only {len(self.probe_items)} items")
        return random.Random(self.random_seed).sample(self.probe_items, k=k)

    # -- 2. answers
    def generate(self, generator: Callable[[list[str]], Sequence[str]] | Any) -> None:
        """Answer every attempt with one call ``generator(texts)`` (or ``generator.generate``)."""
        texts = [a.prompt.text for a in self.attempts]
        fn = generator.generate if hasattr(generator, "generate") else generator
        answers = list(fn(texts))
        if len(answers) != len(texts):
            raise ProbeError(f"{self.name}: the generator returned {len(answers)} answers for {len(texts)} prompts")
        self.set_answers(answers)

    def set_answers(self, answers: Sequence[str]) -> None:
        """Attach answers in attempt order; each must be a string."""
        it = iter(answers)
        for i, item in enumerate(self.probe_items):
            for attempt, (p, r) in zip(item.attempts, item.attempt_keys()):
                answer = next(it)
                if not isinstance(answer, str):
                    raise ProbeError(f"{self.name}: item {i}, prompt {p}, repetition {r}: answer must be a string, "
                                     f"got {type(answer).__name__}")
                attempt.answer = answer

    # -- 3. evaluations
    def evaluate(self) -> None:
        for i, item in enumerate(self.probe_items):
            for attempt, (p, r) in zip(item.attempts, item.attempt_keys()):
                try:
                    attempt.evaluate(self.evaluator)
                except Exception as e:  # one bad answer must say where it is
                    raise ProbeError(f"{self.name}: item {i}, prompt {p}, repetition {r}: evaluator "
                                     f"{type(self.evaluator).__name__} failed on answer {attempt.answer!r:.80}: "
                                     f"{type(e).__name__}: {e}") from e

    # -- 4. metrics, intervals, marks
    def calculate_metrics(self) -> dict[str, Any]:
        """Point metrics always; intervals too when ``calculate_cis``; then marks."""
        self.metrics = self.metric_calculator(self.probe_items)
        self.intervals = self.calculate_intervals() if self.calculate_cis else {}
        self.marks = self.calculate_marks()
        return self.metrics

    def calculate_intervals(self) -> dict[str, tuple[float, float]]:
        return bootstrap_intervals(self.probe_items, self.metric_calculator, cycles=self.bootstrap_cycles,
                                   alpha=self.bootstrap_alpha, seed=self.random_seed, mode=self.bootstrap_mode)

    def calculate_marks(self) -> dict[str, dict]:
        """Marks from the intervals when there are any (GenderBench), else from the points."""
        source = self.intervals if self.intervals else self.metrics
        return {m.metric_name: m.prepare_mark_output(source) for m in self.mark_definitions}

    def run(self, generator: Any) -> tuple[dict[str, dict], dict[str, Any]]:
        self.create_probe_items()
        self.generate(generator)
        self.evaluate()
        self.calculate_metrics()
        return self.marks, (self.intervals if self.calculate_cis else self.metrics)

    def __repr__(self) -> str:
        return f"<{self.name}: {len(self.probe_items)} items, {sum(len(i.attempts) for i in self.probe_items)} attempts>"
