"""A probe's phases as cached graph nodes: GenderBench's seven metrics.

    probes.items -> probes.attempts -> probes.evaluations -> probes.metrics
                                                          -> probes.intervals
                                        probes.metrics (+ intervals) -> probes.marks

* ``probes.items`` is pure: probe, its options, repetitions, ``sample_k``, seed, and a
  digest of the data files it reads (so new data re-creates the items).
* ``probes.attempts`` is the only scorer: one ``Generate`` request per attempt, all of
  a run's probes served by the executor together. Under greedy decoding repetitions
  are the same request (generated once); when sampling, each attempt has its own seed
  (``attempt_seed``), so repetitions differ and do not depend on batch neighbours.
  Replay and callable generators answer every attempt (as GenderBench asks them).
* ``probes.evaluations``, ``probes.metrics``, ``probes.intervals`` and ``probes.marks``
  are aggregators. Each carries the probe's code digest, so a new evaluator or new
  mark ranges recompute from the cached attempts and never re-ask the model.

They are metrics like any other, so they live here and register as every metric does.
Which probe a node runs is data: ``ProbeSpec.cls`` names the probe class
(``module:qualname``), so a node builds its probe wherever it runs (a joblib worker
too) without this package knowing the benchmark that ships the probes.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import math
import sys
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from ...engine import Params, Result, metric
from ...engine.adapters.base import PromptTemplate
from ...engine.requests import Generate, GenerateText, GenerationSettings
from .bootstrap import BootstrapMode, bootstrap_intervals
from .items import ProbeItem
from .marks import MarkDefinition
from .probe import Probe, ProbeError


def _source(obj: Any) -> str:
    """Source text, or the qualified name for code without a file (e.g. defined in a notebook)."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)}"


def code_digest(cls: type) -> str:
    """sha256 of the probe's module and of metrics/probes (evaluators, calculators, marks, these nodes)."""
    h = hashlib.sha256(_source(sys.modules.get(cls.__module__, cls)).encode())
    for f in sorted(Path(inspect.getfile(sys.modules[Probe.__module__])).parent.glob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()


def items_digest(cls: type) -> str:
    """sha256 of what builds the items (item-creating methods, default template), not of the evaluator."""
    h = hashlib.sha256(repr(getattr(cls, "default_template", "")).encode())
    for name in ("_create_probe_items", "create_probe_item", "create_prompt", "prepare_scenarios", "first_names"):
        fn = getattr(cls, name, None)
        if fn is not None:
            h.update(_source(fn).encode())
    return h.hexdigest()


class ProbeSpec(Params):
    """Which probe, built how. ``options``: the probe's own keyword arguments (e.g. template).

    ``code`` is the digest of the code a node runs: :func:`items_digest` for the items
    node, :func:`code_digest` (evaluator, calculator, marks) for the later phases.
    ``cls`` is the probe class as ``module:qualname`` (:func:`class_path`).
    """

    probe: str
    cls: str
    options: dict[str, Any] = Field(default_factory=dict)
    num_repetitions: int = 1
    sample_k: Optional[int] = None
    random_seed: int = 123
    data_dir: Optional[str] = None
    data_digest: str = ""
    code: str = ""

    def build(self) -> Probe:
        return probe_from_path(self.cls)(data_dir=self.data_dir, num_repetitions=self.num_repetitions,
                                         sample_k=self.sample_k, random_seed=self.random_seed, **self.options)


#: classes named through :func:`class_path` in this process (a probe defined in a script,
#: a notebook or ``exec``'d code has no module to import it from)
_NAMED: dict[str, type[Probe]] = {}


def class_path(cls: type[Probe]) -> str:
    """``module:qualname`` of a probe class, what ``ProbeSpec.cls`` holds."""
    path = f"{cls.__module__}:{cls.__qualname__}"
    _NAMED[path] = cls
    return path


def probe_from_path(path: str) -> type[Probe]:
    """The probe class ``module:qualname`` names: one named in this process, else from its module."""
    if path in _NAMED:
        return _NAMED[path]
    module, _, name = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, Probe)):
        raise ProbeError(f"{path!r} is not a Probe subclass")
    return obj


class AttemptParams(Params):
    probe: str
    max_new_tokens: int = 300
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    chat_template: bool = True


class IntervalParams(Params):
    spec: ProbeSpec
    bootstrap_cycles: int = 1000
    bootstrap_alpha: float = 0.95
    bootstrap_mode: BootstrapMode = "genderbench"


class MarkParams(Params):
    probe: str
    definitions: list[dict[str, Any]]
    code: str = ""


def attempt_seed(seed: int, sample_index: int) -> int:
    """The sampling seed of one attempt: a function of the run seed and its sample index."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{sample_index}".encode()).digest()[:4], "little")


def restore(spec: ProbeSpec, items: dict, evaluations: dict | None = None) -> Probe:
    """A probe with its items (and answers' evaluations) back from the cached JSON."""
    probe = spec.build()
    probe.probe_items = [ProbeItem.from_json_dict(d) for d in items["items"]]
    if evaluations is not None:
        attempts = list(probe.attempts)
        for a, ev, und in zip(attempts, evaluations["evaluations"], evaluations["undetected"]):
            a.evaluation, a.evaluation_undetected = ev, und
    return probe


@metric("probes.items", version="1", params=ProbeSpec)
def probe_items(params: ProbeSpec) -> dict:
    """The probe's items (prompts and metadata), in GenderBench's order."""
    probe = params.build()
    items = probe.create_probe_items()
    return {"probe": probe.name, "items": [it.to_json_dict() for it in items]}


@metric("probes.attempts", version="1", params=AttemptParams, parents={"items": "probes.items"}, needs=("model",),
        requests={"model": {"generate|generate_text": ()}})
def probe_attempts(items: dict, model: Any, params: AttemptParams):
    """Every attempt's answer, generated through the executor (one request per attempt).

    An attempt's ``sample_index`` is its ordinal among the probe's attempts with the
    same prompt text (repetitions, and items that repeat a text). Greedy decoding on a
    model collapses them all to index 0: one generation per distinct text.
    """
    name = items["probe"]
    distinct = params.do_sample or getattr(model, "answers_per_repetition", False)
    where, keys, seen = [], [], {}
    for i, it in enumerate(items["items"]):
        for p, prompt in enumerate(it["prompts"]):
            for r in range(it["num_repetitions"]):
                text = prompt["text"]
                j = seen[text] = seen.get(text, -1) + 1
                where.append((i, p, r))
                keys.append((text, r, j))
    check = getattr(model, "problems", None)
    bad = check(keys) if check is not None else {}
    if bad:
        first = min(bad)
        i, p, r = where[first]
        raise ProbeError(f"{name}: item {i}, prompt {p}, repetition {r}: {bad[first]} "
                         f"({len(bad)} of {len(keys)} attempts have no answer)")
    text_backend = "generate" not in model.capabilities().kinds  # replay, a callable: prompts go as text
    enc = None if text_backend else model.encoder()
    template = PromptTemplate.chat() if params.chat_template else PromptTemplate(
        user_start_tag="", user_end_tag="", asst_start_tag="", asst_end_tag="")
    prompt_ids: dict[str, tuple[int, ...]] = {}
    reqs = []
    for text, _, j in keys:
        if enc is not None and text not in prompt_ids:
            prompt_ids[text] = enc.encode_qa(text, "", template).prompt_ids
        settings = GenerationSettings(max_new_tokens=params.max_new_tokens, do_sample=params.do_sample,
                                      temperature=params.temperature, top_p=params.top_p,
                                      seed=attempt_seed(params.seed, j) if params.do_sample else None)
        index = j if distinct else 0
        reqs.append(GenerateText(text, settings, index) if text_backend else Generate(prompt_ids[text], settings, sample_index=index))
    results = yield reqs
    return {"probe": name, "answers": [res.text for res in results]}


@metric("probes.evaluations", version="1", params=ProbeSpec, parents={"items": "probes.items", "attempts": "probes.attempts"})
def probe_evaluations(items: dict, attempts: dict, params: ProbeSpec) -> dict:
    """The evaluator's reading of every answer, and whether it was undetected."""
    probe = restore(params, items)
    probe.set_answers(attempts["answers"])
    probe.evaluate()
    atts = list(probe.attempts)
    return {"probe": probe.name, "evaluations": [a.evaluation for a in atts],
            "undetected": [bool(a.evaluation_undetected) for a in atts]}


@metric("probes.metrics", version="1", params=ProbeSpec, parents={"items": "probes.items", "evaluations": "probes.evaluations"})
def probe_metrics(items: dict, evaluations: dict, params: ProbeSpec) -> dict:
    """The probe's metrics on all its items (point values)."""
    probe = restore(params, items, evaluations)
    return {k: float(v) for k, v in probe.metric_calculator(probe.probe_items).items()}


@metric("probes.intervals", version="1", params=IntervalParams,
        parents={"items": "probes.items", "evaluations": "probes.evaluations"})
def probe_intervals(items: dict, evaluations: dict, params: IntervalParams) -> dict:
    """Bootstrap intervals (seeded; GenderBench's draws in ``genderbench`` mode)."""
    probe = restore(params.spec, items, evaluations)
    ci = bootstrap_intervals(probe.probe_items, probe.metric_calculator, cycles=params.bootstrap_cycles,
                             alpha=params.bootstrap_alpha, seed=params.spec.random_seed, mode=params.bootstrap_mode)
    return {k: list(v) for k, v in ci.items()}


def _marks(metrics: dict, intervals: dict | None, params: MarkParams) -> Result:
    defs = [MarkDefinition(**d) for d in params.definitions]
    source = {k: tuple(v) for k, v in intervals.items()} if intervals else metrics
    marks = {d.metric_name: d.prepare_mark_output(source) for d in defs}
    # the headline number: the point value of the first marked metric (e.g. DirectProbe's fail_rate)
    headline = metrics.get(defs[0].metric_name) if defs else None
    reason = nan_reasons(metrics).get(defs[0].metric_name) if defs else None
    return Result(agg_value=headline, extra={"probe": params.probe, "metrics": metrics, "intervals": intervals or {},
                                         "marks": marks}, reason=reason)


def nan_reasons(metrics: dict) -> dict[str, str]:
    """Metric -> why it is NaN (only the NaN ones): the terminal, EVAL and SUMMARY say the same."""
    undetected = metrics.get("undetected_rate_attempts")
    if isinstance(undetected, (int, float)) and undetected == 1.0:
        why = "undetected_rate_attempts = 1.0: the evaluator could read none of the answers"
    elif isinstance(undetected, (int, float)) and math.isfinite(undetected):
        why = (f"undefined on the evaluated answers (undetected_rate_attempts = {undetected:.3g}: "
               "too few answers of some kind were read)")
    else:
        why = "undefined on these answers"
    return {k: why for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)}


@metric("probes.marks", version="1", params=MarkParams, parents={"metrics": "probes.metrics", "intervals": "probes.intervals"})
def probe_marks(metrics: dict, intervals: dict, params: MarkParams) -> Result:
    """Marks A-D from the intervals (GenderBench's benefit-of-the-doubt rule)."""
    return _marks(metrics, intervals, params)


@metric("probes.marks_points", version="1", params=MarkParams, parents={"metrics": "probes.metrics"})
def probe_marks_points(metrics: dict, params: MarkParams) -> Result:
    """Marks A-D from the point values (``--no-cis``)."""
    return _marks(metrics, None, params)


__all__ = ["ProbeSpec", "class_path", "probe_from_path", "items_digest", "AttemptParams", "IntervalParams", "MarkParams", "attempt_seed", "code_digest",
           "probe_items", "probe_attempts", "probe_evaluations", "probe_metrics", "probe_intervals", "probe_marks",
           "probe_marks_points", "restore", "nan_reasons"]
