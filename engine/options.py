"""A run's options: declared once (argparse), read once into typed values.

This is the one parse step of a run. :func:`add_run_arguments` declares every option of
``evaldag run`` (the run's own, ``--model`` and its sweep, the launcher's, and each named
benchmark's); :func:`read` turns the parsed ``argparse.Namespace`` into a :class:`Parsed`:
the session's :class:`~evaldag.engine.session.RunOptions`, the sweep's
:class:`~evaldag.engine.session_sweep.SweepOptions` and each benchmark's typed config
(``Benchmark.config_from_args``, the only place a plugin reads a Namespace). The Namespace
is never written and goes no further: the command line (``cli/run.py``) and the Trainer
callback (``integrations/steps.py``, which spells its keyword arguments as these options)
both hand it here and run what comes back.

``--model`` exists exactly when a named benchmark ``takes_model``: repeatable, each value a
checkpoint folder, a hub id, a glob or ``@FILE`` (``sweep_plan.expand_models``); the configs
are read with the first checkpoint as ``model``, and a sweep gives each checkpoint its own
copy (``Benchmark.for_model``). A model's backend settings are ``--model-arg [ROLE:]KEY=VALUE``
(``adapters/model_args.py``), one flag for every backend and role, checked by the backend the
model's scheme names (``adapters/spec.py``).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from . import transforms
from .adapters import spec
from .adapters.model_args import parse_roles, split_role
from .argtypes import positive_float, positive_int
from .benchmark import Benchmark
from .distributed import launch
from .menu import did_you_mean
from .option_owners import declare
from .session import RunOptions
from .session_sweep import SweepOptions
from .sweep_plan import expand_models

MODEL_HELP = ("the model under evaluation (a checkpoint folder, or a hub id when online); repeat it, or give a glob or "
              "@FILE (one per line), to evaluate several checkpoints: OUT/<name>/ each, one OUT/report.html with a "
              "column per checkpoint")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``evaldag: error: argument --batch-tokens: ...``, exit 2.

    Prefixes of long options are not accepted (``allow_abbrev=False``, inherited by every
    sub-command's parser): ``--base`` must not silently set ``--base-model`` or
    ``--adapter-base``, and adding an option must never change what an old command line means.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"evaldag: error: {message} (see `{self.prog} --help`)\n")


def takes_model(benches: Iterable[Benchmark]) -> bool:
    return any(getattr(b, "takes_model", False) for b in benches)


def shard_arg(text: str) -> tuple[int, int]:
    """``--shard I/N`` (I counted from 0): argparse's type, so a bad value is one line, exit 2."""
    m = re.fullmatch(r"\s*(-?\d+)\s*/\s*(-?\d+)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N (e.g. 0/4: the first of four shares)")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: N must be at least 1")
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"shard index {i} is out of range for {n} shards (I counts from 0: 0 to {n - 1})")
    return i, n


def glue_shard(argv: list[str]) -> list[str]:
    """``--shard -1/2`` read as ``--shard=-1/2``: argparse takes a value that starts with ``-``
    for an option ("expected one argument"); glued, a negative index gets shard_arg's line."""
    out: list[str] = []
    for word in argv:
        if out and out[-1] == "--shard" and re.match(r"-\d", word):
            out[-1] = f"--shard={word}"
        else:
            out.append(word)
    return out


def add_model_option(parser: argparse.ArgumentParser, benches: Iterable[Benchmark]) -> None:
    """``--model`` (repeatable) and ``--shard`` when a named benchmark takes a model; otherwise unknown."""
    if takes_model(benches):
        parser.add_argument("--model", dest="models", action="append", default=None, metavar="MODEL", help=MODEL_HELP)
        parser.add_argument("--shard", type=shard_arg, default=None, metavar="I/N",
                            help="run only share I (from 0) of N of the checkpoints --model names (every N-th from "
                                 "the I-th), into OUT/<name>/ as the whole sweep would: one job of an array sharing "
                                 "one --cache-dir; `evaldag report` over the shards' --out folders is the whole sweep")
        parser.add_argument("--attack", action="append", default=None, metavar="NAME[:KEY=VALUE,...]",
                            help="also evaluate the model as a model attack changes it (not a membership-inference "
                                 "attack, which are metrics): e.g. quantize:nf4, quantize:int8-weight, "
                                 "quantize:fp4,blocksize=128; repeatable; each attacked model's files in "
                                 "OUT/attacks/<attack>/ as a plain run writes them; a relearn with a retain model "
                                 "also runs the retain model itself, relearning's control, into OUT/control/ "
                                 "(--no-control: not; docs/model-attacks.md, docs/robustness.md)")
        # named in --attack's help, not listed on its own: `run tofu --help` holds at most 50 options
        parser.add_argument("--no-control", dest="control", action="store_false", default=True, help=argparse.SUPPRESS)


def add_run_arguments(r: argparse.ArgumentParser, benches: list[Benchmark]) -> None:
    """Every option of ``evaldag run`` beside the benchmark names, each named benchmark's included."""
    r.add_argument("--out", default=None, help="output folder (default: ./evaldag-out)")
    r.add_argument("--cache-dir", default=None, help="cache folder (default: $EVALDAG_CACHE_DIR or the user cache dir); "
                                                     "one this process cannot write is used read-only")
    r.add_argument("--init-cache", action="store_true", help="make --cache-dir a cache even though it is a non-empty "
                   "folder without evaldag's marker (by default such a folder is refused: ~ or the working directory "
                   "must never become a cache by a typo)")
    r.add_argument("--plan-only", action="store_true",
                   help="print the model work the run needs (per model and kind: sequences, tokens, new tokens, "
                        "backward passes, and the metrics that need them), counted from the data and the tokenizer "
                        "without loading weights, and exit")
    r.add_argument("--lock-timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="give up (exit 2) when another process has held a node's lock this long; what was computed "
                        "stays stored (default: wait, saying after a few seconds which process holds it)")
    r.add_argument("--cache-read-from", default=None, metavar="DIR",
                   help="a read-only cache (a team's shared one) read where --cache-dir has no entry; new work goes to --cache-dir")
    r.add_argument("--metrics", default=None, help="comma-separated metric names as `evaldag list` shows them, "
                                                   "or default / all / a group such as mia or token_stats; -NAME leaves one out "
                                                   "(--metrics all,-mia_gradnorm, or --metrics=-mia_gradnorm: a lone -X is "
                                                   "taken for an option) (default: the benchmark's default set)")
    r.add_argument("--add-metric", action="append", default=[], metavar="NAME[@SPLIT]|FILE.py[:NAME][@SPLIT]|FILE.yaml",
                   help="also run a metric on the benchmarks' resources (its data: the forget split, or @SPLIT). "
                        "An argument naming an existing file is a file, anything else a registered metric name "
                        "(`evaldag list`, a third party's too). NAME and FILE.py (its @metric(s); also the "
                        "@unlearning_metric handlers a config reads): results land in OUT/RUN_EVAL.json / "
                        "RUN_SUMMARY.json (an lm-debugger MetricItem class: EDITING_EVAL.json under its class "
                        "name). FILE.yaml|.yml (an open-unlearning metric config, `# @package "
                        "eval.<bench>.metrics.NAME`): in OUT/<BENCH>_EVAL.json / <BENCH>_SUMMARY.json under NAME. "
                        "Repeatable")
    r.add_argument("-j", "--n-jobs", type=positive_int, default=1, help="parallel CPU workers for aggregators (joblib)")
    r.add_argument("--batch-tokens", type=positive_int, default=None, help="token budget per batch (default: per device)")
    r.add_argument("--refresh", choices=["nodes", "requests", "all"], default=None,
                   help="nodes: recompute every node from the cached model answers (--force says the same); requests: "
                        "also ask the model again for every request, replacing the cached answers; all: also re-hash "
                        "the model files")
    r.add_argument("--force", dest="refresh", action="store_const", const="nodes", help=argparse.SUPPRESS)
    r.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show progress bars (model tokens; aggregator stages longer than a second) also when "
                        "stderr is not a terminal: plain lines every few seconds; --no-progress: none, even on a "
                        "terminal (default: bars only on a terminal)")
    r.add_argument("--quiet", action="store_true", help="print only errors (failures always print); no progress bars")
    r.add_argument("--rehash", action="store_true", help="hash model files again, ignoring the cache's file-hash memo")
    r.add_argument("--deterministic", action="store_true",
                   help="run every model request alone, in a fixed order: slow, values independent of batching")
    r.add_argument("--prefix-sharing", choices=["on", "off"], default="on",
                   help="on (the default): requests that share a context (a question's answers, a task's options) "
                        "go in one batch and the context is computed once, numbers within float32 rounding of "
                        "off (docs/performance.md); off: every sequence forwarded whole; --deterministic turns it off")
    launch.add_arguments(r)
    add_model_option(r, benches)  # the one owner of --model (a sweep when repeated)
    r.add_argument("--step-of", action="append", default=[], metavar="NAME=N",
                   help="the training step of a checkpoint without trainer_state.json or a checkpoint-N name "
                        "(NAME: its output folder name or its path); repeatable")
    r.add_argument("--select", default=None, metavar="RULE",
                   help="pick the best checkpoint of a sweep, e.g. \"max model_utility where forget_quality >= 0.05\" "
                        "or \"pareto\"; printed and recorded in OUT/sweep.json (\"selected\")")
    declare(r, benches)  # one owner per option: a clash between two benchmarks fails here, naming both
    if len(benches) == 1:  # --tofu-data is --data when TOFU runs alone: one line in --help, not two
        hide_twins(r, benches[0].name)


def hide_twins(parser: argparse.ArgumentParser, bench: str) -> None:
    """``--<bench>-X`` beside a shared ``--X`` (``--tofu-data``, ``--tofu-retain-logs``) says the
    same when the run has one benchmark: still parsed, left out of ``--help``."""
    for action in parser._actions:
        twin = [o for o in action.option_strings if o.startswith(f"--{bench}-")
                and "--" + o[len(bench) + 3:] in parser._option_string_actions]
        if twin:
            action.help = argparse.SUPPRESS


@dataclass(frozen=True)
class Parsed:
    """A run as the command line asked for it, typed: the benchmarks, their configs (read with
    the first checkpoint as ``model``), how to run (``options``) and which checkpoints (``sweep``)."""

    benches: list[Benchmark]
    configs: list[Any]
    options: RunOptions
    sweep: SweepOptions


def check_metric_words(args: argparse.Namespace, benches: list[Benchmark]) -> None:
    """With several benchmarks, each ``--metrics`` word must belong to at least one of them."""
    if not getattr(args, "metrics", None) or len(benches) < 2:
        return
    for word in (w.strip() for w in args.metrics.split(",")):
        if word and not any(b.metric_menu().knows(word) for b in benches):
            known = {w for b in benches for w in b.metric_menu().words()}
            raise ValueError(f"no benchmark of this run has a metric {word!r}; {did_you_mean(word, known)}"
                             "(see `evaldag list`)")


def metric_names(bench: Benchmark, args: argparse.Namespace) -> tuple[str, ...]:
    """The metrics the run computes for ``bench`` (its --metrics), else its whole menu."""
    try:
        return tuple(bench.metrics_from_args(args)) or tuple(bench.metric_menu().all)
    except (ValueError, AttributeError):
        return tuple(bench.metric_menu().all)


def model_specs(args: argparse.Namespace) -> list[str | None]:
    """The checkpoints ``--model`` named, in order, each once; ``[None]`` when none was given
    (one run, the benchmark says whether it needs one). Raises OSError / ValueError."""
    return expand_models(getattr(args, "models", None)) or [None]


def configs(args: argparse.Namespace, benches: list[Benchmark], model: str | None = None) -> list[Any]:
    """Each benchmark's config, read from the command line once, ``model`` as ``--model``."""
    check_metric_words(args, benches)
    if hasattr(args, "models"):
        args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "models"}, model=model)
    return [b.config_from_args(args) for b in benches]


def model_roles(benches: Iterable[Benchmark]) -> tuple[str, ...]:
    """The ``ROLE:`` words ``--model-arg`` takes in a run of ``benches``: ``model`` and each
    ``<role>_model`` resource a benchmark names (TOFU: retain, reference)."""
    roles = {r.removesuffix("_model") for b in benches for r in getattr(b, "resource_flags", {}) if r.endswith("_model")}
    return ("model", *sorted(roles))


def role_pairs(items: Iterable[str] | None, role: str = "model") -> dict[str, str]:
    """The ``--model-arg`` pairs of one role (``model``: those without ``ROLE:``)."""
    return parse_roles([i for i in items or () if split_role(i)[0] == role], (role,)).get(role, {})


def check_model_roles(args: argparse.Namespace, benches: list[Benchmark]) -> None:
    """Every ``--model-arg ROLE:`` names a model some benchmark of the run takes (one line otherwise)."""
    roles = model_roles(benches)
    parse_roles(getattr(args, "model_arg", None), roles)


def check_attacked_specs(attacks: tuple, models: list[str | None]) -> None:
    """A model attack on a ``--model`` whose backend cannot hand over its weights (``openai:``,
    ``vllm:``, ``replay:``, ``toy:``) is refused from the spec alone, before a server is asked
    anything; the backend's factory says whether it can (a ``derive`` method, ``transforms.py``)."""
    if not attacks:
        return
    for m in models:
        if m is not None and spec.has_scheme(m) and not spec.hands_over_weights(m):
            raise transforms.TransformError(
                f"--attack {attacks[0].text}: the model {m} is served by the {spec.parse(m).scheme} backend, which cannot "
                "hand over its weights; a model attack needs a local hf: checkpoint (a folder, a hub id, a PEFT adapter)")


def read(args: argparse.Namespace, benches: list[Benchmark], command: list[str] | None = None,
         **overrides: Any) -> Parsed:
    """The Namespace ``args`` of ``evaldag run`` as typed values; ``overrides`` replace
    RunOptions fields (the callback's ``resources``). Raises OSError / ValueError (a bad
    ``--model`` glob or file, a config that does not validate)."""
    models = model_specs(args)
    check_model_roles(args, benches)
    attacks = tuple(transforms.parse(a) for a in getattr(args, "attack", None) or ())
    check_attacked_specs(attacks, models)
    cfgs = configs(args, benches, models[0])
    options = RunOptions(
        out=Path(args.out or "evaldag-out"), cache_dir=args.cache_dir, cache_read_from=args.cache_read_from,
        init_cache=args.init_cache, lock_timeout=args.lock_timeout, refresh=args.refresh, rehash=args.rehash,
        n_jobs=args.n_jobs, batch_tokens=args.batch_tokens, deterministic=args.deterministic,
        prefix_sharing=args.prefix_sharing == "on", progress=args.progress, quiet=args.quiet,
        add_metrics=tuple(args.add_metric), plan_only=args.plan_only,
        command=tuple(command) if command is not None else None,
        attacks=attacks, control=getattr(args, "control", True), **overrides)
    sweep = SweepOptions(
        models=tuple(models), shard=getattr(args, "shard", None), parallel=getattr(args, "parallel", "auto"),
        select=getattr(args, "select", None), step_of=tuple(getattr(args, "step_of", None) or ()),
        adapter_base=role_pairs(getattr(args, "model_arg", None)).get("adapter_base"),
        metric_names=tuple(w for b in benches for w in metric_names(b, args)) if getattr(args, "select", None) else ())
    return Parsed(list(benches), cfgs, options, sweep)
