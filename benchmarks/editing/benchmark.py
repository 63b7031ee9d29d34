"""``evaldag run editing``: an edited model beside its original, as a Benchmark plugin.

    evaldag run editing --model EDITED_DIR --base-model ORIGINAL_DIR [--edits FILE] [--texts FILE]

Weight-delta norms per manipulated layer, perplexity before / after / change, efficacy,
generalisation and specificity before and after, lm-debugger's dataset efficacy, and ROME's
causal trace on the original model. See docs/editing.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ...engine import Node
from ...engine.benchmark import Benchmark, MetricMenu
from ...engine.argtypes import positive_int
from ...engine.render.report_html import RunFolder, Section
from .. import common
from ..base_model import add_base_model_argument
from . import report, spec
from .config import ALL_METRICS, CORPUS_METRICS, DEFAULT_METRICS, GROUPS, EditingConfig


def _ints(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None


class EditingBenchmark(Benchmark):
    name = "editing"
    group = spec.GROUP
    description = "knowledge editing: weight-delta norms, perplexity, efficacy/generalisation/specificity, causal trace"
    Config = EditingConfig
    metadata = {"licence": "the shipped edits and texts are invented by evaldag (Apache-2.0), built from the demo's "
                           "fictitious authors by tests/asset_builders/editing/make_assets.py; the trace model in assets/tracer "
                           "and its facts, edits and texts are made by tests/asset_builders/editing/make_tracer.py (Apache-2.0 too)"}
    resource_flags = {"model": "--model EDITED_DIR", "base_model": "--base-model ORIGINAL_DIR", "corpus": "--corpus FILE"}
    takes_model = True  # --model (here: the edited checkpoint) is the CLI's

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        common.add_model_arguments(p, retain=False, prompt=False)  # --dtype, --device (--model: takes_model)
        g = p.add_argument_group("editing")
        add_base_model_argument(g)  # TOFU and MUSE read it too: one flag, one base_model resource
        g.add_argument("--edits", default=None, help="EDITING: edit requests (JSON/JSONL, flat or CounterFact rows); default: the shipped set")
        g.add_argument("--texts", default=None, help="EDITING: texts for perplexity (JSON/JSONL of {text} or one per line); default: the shipped set")
        g.add_argument("--edit-layers", default=None, help="EDITING: weight-delta norms on these layers only (e.g. 3,4); default: every manipulated layer")
        g.add_argument("--norm", choices=["fro", "spectral"], default="fro", help="EDITING: norm of the down-projection delta")
        g.add_argument("--ppl-max-length", type=positive_int, default=None, help="EDITING: perplexity window (default: the model's context, at most 1024)")
        g.add_argument("--ppl-stride", type=positive_int, default=None, help="EDITING: perplexity stride (default: half the window)")
        g.add_argument("--ppl-per-text", action="store_true",
                       help="EDITING: perplexity of each text alone, averaged (lm-debugger's), not of the texts joined (HF's)")
        g.add_argument("--trace-samples", type=positive_int, default=10, help="EDITING: corrupted copies per trace cell")
        g.add_argument("--trace-noise", type=float, default=None, help="EDITING: absolute noise std (default: 3 x the subject-embedding std)")
        g.add_argument("--trace-seed", type=int, default=1, help="EDITING: seed of the trace noise (ROME: 1)")
        g.add_argument("--trace-window", type=positive_int, default=10, help="EDITING: layers restored together by the MLP/attention traces")
        g.add_argument("--trace-edits", default=None, help="EDITING: indices of the edits to trace (default: all)")
        g.add_argument("--trace-occurrence", choices=["first", "last"], default="last",
                       help="EDITING: which mention of the subject the noise corrupts (ROME: first)")
        g.add_argument("--corpus", default=None, help="EDITING: texts for ROME's key covariance (rome_denominator, rome_key_ood), "
                                                      "none of them scored (JSON/JSONL of {text} or one per line)")
        g.add_argument("--cov-ridge", type=float, default=0.0,
                       help="EDITING: add R * I to the key covariance before inverting (default 0: lm-debugger's exact inverse; "
                            "make_edit --method rome uses 0.01)")
        g.add_argument("--rome-layers", default=None, help="EDITING: layers of the ROME diagnostics (e.g. 2); default: every manipulated layer")
        g.add_argument("--context-templates", choices=["rome", "none"], default="rome",
                       help="EDITING: average the subject's key over ROME's sampled prefixes (rome) or take the bare prompt's (none)")

    def config_from_args(self, args: argparse.Namespace) -> EditingConfig:
        return EditingConfig(
            model=args.model, base_model=args.base_model, edits=args.edits, texts=args.texts,
            metrics=self.metrics_from_args(args), dtype=args.dtype, device=args.device,
            layers=_ints(args.edit_layers), norm=args.norm, max_length=args.ppl_max_length, stride=args.ppl_stride,
            ppl_per_text=args.ppl_per_text,
            trace_samples=args.trace_samples, trace_noise=args.trace_noise, trace_seed=args.trace_seed,
            trace_window=args.trace_window, trace_edits=_ints(args.trace_edits), trace_occurrence=args.trace_occurrence,
            backend_options=common.backend_options(args).get("model", {}),
            corpus=args.corpus, cov_ridge=args.cov_ridge, rome_layers=_ints(args.rome_layers), context_templates=args.context_templates)

    def metrics_from_args(self, args: argparse.Namespace) -> tuple[str, ...]:
        """The menu's names; ``all`` brings the ROME diagnostics only with --corpus (named, they need it)."""
        names = super().metrics_from_args(args)
        if getattr(args, "corpus", None):
            return names
        given = {w.strip() for w in (getattr(args, "metrics", None) or "").split(",")}
        return tuple(n for n in names if n not in CORPUS_METRICS or n in given or "rome_diagnostics" in given)

    def metric_menu(self) -> MetricMenu:
        return MetricMenu(default=DEFAULT_METRICS, all=ALL_METRICS, groups=GROUPS)

    def plan(self, cfg: EditingConfig) -> list[Node]:
        return spec.nodes(cfg)

    def build(self, cfg: EditingConfig) -> tuple[list[Node], dict[str, Any]]:
        res = spec.resources(cfg)  # every check that needs no forward pass runs here
        if set(CORPUS_METRICS) & set(cfg.metrics):  # which scalar the run reports, said aloud
            how = (f"the inverse of C + {cfg.cov_ridge:g} I (--cov-ridge)" if cfg.cov_ridge else
                   "the exact inverse of C (lm-debugger's; make_edit --method rome solves with --cov-ridge 0.01)")
            print(f"evaldag: note: ROME diagnostics on layer(s) {', '.join(map(str, spec.rome(cfg)['layers']))} with {how}, "
                  f"context templates {cfg.context_templates}", file=sys.stderr)
        return spec.nodes(cfg), res

    def report_sections(self, runs: list[RunFolder]) -> list[Section]:
        html, rome = report.section_html(runs, self.group), report.rome_html(runs, self.group)
        return ([Section("Causal traces", html, order=40, id="editing-traces")] if html else []) + \
            ([Section("ROME conditioning", rome, order=41, id="editing-rome")] if rome else [])
