"""``evaldag run lmeval``: lm-evaluation-harness tasks as graph nodes, as a plugin.

    evaldag run lmeval --tasks mmlu,wmdp_bio [--include-path DIR] [--num-fewshot N] [--limit N] --model DIR
    evaldag run tofu lmeval --tasks mmlu ... --model DIR      # one graph, one cache, one report

lm-evaluation-harness builds the requests (its TaskManager, task configs, few-shot
sampling, filters, metrics and group aggregation); evaldag serves them (``lm.py``,
``nodes.py``). Every check that needs no model -- lm-evaluation-harness installed, the
task names, their datasets reachable offline, their output types -- runs in
``config_from_args`` / ``build``, before any weights load. See docs/lmeval.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...engine import HFModel, Node
from ...engine.benchmark import Benchmark, MetricMenu
from ...engine.cli.types import positive_int
from ...engine.render.report_html import RunFolder, Section
from ..uncertainty import add_bootstrap_arguments, bootstrap_options
from .. import common
from . import outputs, tasks
from .config import LmevalConfig

GROUP = "LMEVAL"


def _bos(text: str | None) -> bool | None:
    if text in (None, "default"):
        return None
    return text == "true"


class LmevalBenchmark(Benchmark):
    name = "lmeval"
    group = GROUP
    description = "lm-evaluation-harness tasks (MMLU, WMDP, any local YAML task) served by evaldag's executor and cache"
    Config = LmevalConfig
    metadata = {"licence": "each task's data under its own licence (lm-evaluation-harness's task folders name them)"}
    resource_flags = {"model": "--model DIR"}
    takes_model = True

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        common.add_model_arguments(p, retain=False, prompt=True)  # --template chat, --system-prompt
        common.add_limit_argument(p)  # documents per task
        g = p.add_argument_group("lmeval")
        g.add_argument("--tasks", default=None, help="LMEVAL: lm-evaluation-harness task, group or tag names, comma-separated")
        g.add_argument("--include-path", default=None, help="LMEVAL: a folder of task YAML files (its --include_path)")
        g.add_argument("--num-fewshot", type=int, default=None, help="LMEVAL: few-shot examples (default: each task's own)")
        add_bootstrap_arguments(g, "LMEVAL: the stderrs' bootstrap iterations, default 100000", seed=False)
        g.add_argument("--add-bos-token", choices=["default", "true", "false"], default="default",
                       help="LMEVAL: HFLM's add_bos_token (default: the tokenizer's own behaviour)")
        g.add_argument("--prefix-token-id", type=positive_int, default=None,
                       help="LMEVAL: the token an empty context is scored after (default: bos, else eos)")

    def config_from_args(self, args: argparse.Namespace) -> LmevalConfig:
        names = tuple(t.strip() for t in (args.tasks or "").split(",") if t.strip())
        if not names:
            raise ValueError("--tasks is required: lm-evaluation-harness task names, e.g. --tasks mmlu,wmdp_bio")
        if args.num_fewshot is not None and args.num_fewshot < 0:
            raise ValueError(f"--num-fewshot must be >= 0, got {args.num_fewshot}")
        return LmevalConfig(**common.model_options(args), tasks=names, include_path=args.include_path,
                            num_fewshot=args.num_fewshot, limit=getattr(args, "limit", None), bootstrap_iters=bootstrap_options(args, resamples=100000, seed=0)["bootstrap_resamples"],
                            add_bos_token=_bos(args.add_bos_token), prefix_token_id=args.prefix_token_id)

    def metric_menu(self) -> MetricMenu:
        return MetricMenu(default=(), all=())

    def plan(self, cfg: LmevalConfig) -> list[Node]:
        return self.nodes(cfg, tasks.plan(cfg.tasks, cfg.include_path))

    def nodes(self, cfg: LmevalConfig, plan: tasks.Plan) -> list[Node]:
        from .nodes import entry_name, lm_eval_entry, lm_eval_scorer

        scorer = lm_eval_scorer(
            tasks=cfg.tasks, include_path=cfg.include_path, task_digest=plan.digest, num_fewshot=cfg.num_fewshot,
            limit=cfg.limit, bootstrap_iters=cfg.bootstrap_iters, chat=cfg.template.apply_chat_template,
            system_prompt=cfg.template.system_prompt, lm_eval_version=tasks.installed_version(),
            add_bos_token=cfg.add_bos_token, prefix_token_id=cfg.prefix_token_id)  # unnamed: in no EVAL/SUMMARY
        entries = [lm_eval_entry(parents={"run": scorer}, task=t, metric=m, filter=f).named(entry_name(t, m, f), GROUP)
                   for t, m, f in dict.fromkeys(plan.entries)]
        return [scorer, *entries]

    def build(self, cfg: LmevalConfig) -> tuple[list[Node], dict[str, Any]]:
        try:
            plan = tasks.plan(cfg.tasks, cfg.include_path)  # names, datasets, output types: before any model
        except tasks.TaskError as e:
            raise ValueError(str(e)) from None
        if not cfg.model:
            raise ValueError("--model is required (a local checkpoint folder)")
        model = common.hf_model(cfg.model, cfg)
        if not isinstance(model, HFModel):  # EvaldagLM reads the tokenizer and config.json from the folder
            raise ValueError(f"--model {cfg.model}: lmeval serves a local checkpoint (a folder or hf:DIR); "
                             "lm-evaluation-harness tokenizes with the checkpoint's own tokenizer and config")
        return self.nodes(cfg, plan), {"model": model}

    def write_outputs(self, result: Any, out_dir: Any, config: Any) -> list:
        return outputs.write(result, out_dir)

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        html = outputs.section_html(runs)
        return [Section("lm-evaluation-harness", html, order=30, id="lmeval")] if html else []
