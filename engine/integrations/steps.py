"""One benchmark evaluated again and again on a model that changes: the callback's engine.

:class:`StepEvaluation` turns the callback's keyword arguments into the command line
``evaldag run BENCH --flag value ...`` would give (the CLI's own parser, so every option
has the same name, default and check), validates it once before training starts, and
then, at each step, runs it through the CLI's one-run path (``cli/run.py``: the same
graph, planner, executor, cache, outputs and run log) with the Trainer's in-memory model
in place of ``--model``'s folder. The retain and reference models are ordinary folders:
their nodes and requests are cached at the first step and only read afterwards.

``--model`` still names a folder, the one the tokenizer and config are read from (the
chat-template and side-model checks read files): the model's own ``name_or_path`` when it
holds a tokenizer, else ``OUTPUT_DIR/evaldag/model/`` with the config and the tokenizer
the Trainer was given (no weights). The benchmark is found through the registry; the
engine imports no benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
from pathlib import Path
from typing import Any

from ..cli.added import added_metrics
from ..cli.main import parser as cli_parser
from ..cli.models import for_model
from ..cli.run import _one, check_folders, config_error, configs
from ..graph import Graph, GraphError
from ..planner import plan
from ..resources import ResourceSet
from ..redact import redact_argv
from ..registry import BENCHMARKS

#: options the callback owns: the model is the Trainer's, the output folder is per step
OWNED = {"model": "the Trainer's model is evaluated", "out": "each step writes OUTPUT_DIR/evaldag/step-<N>/",
         "launcher": "the training job's processes are used"}
_VOCAB = ("tokenizer.json", "vocab.json", "vocab.txt", "tiktoken.model")


def to_argv(options: dict[str, Any]) -> list[str]:
    """``{"retain_model": "r", "metrics": ["a", "b"], "quiet": True}`` -> ``--retain-model r --metrics a,b --quiet``."""
    argv: list[str] = []
    for key, value in options.items():
        if key in OWNED:
            raise ValueError(f"EvaldagCallback: {key}= is not an option here ({OWNED[key]})")
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            if key == "metrics":
                argv += [flag, ",".join(map(str, value))]
            else:  # a repeatable option (add_metric)
                for item in value:
                    argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def parse(benchmark: str, argv: list[str]) -> argparse.Namespace:
    """The CLI's parser on ``run BENCH ARGV``; its one error line as a ValueError."""
    if benchmark not in BENCHMARKS:
        close = difflib.get_close_matches(benchmark, BENCHMARKS.names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(BENCHMARKS.names())}"
        raise ValueError(f"EvaldagCallback: unknown benchmark {benchmark!r}{hint}")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return cli_parser([benchmark], command="run").parse_args(["run", benchmark, *argv])
    except SystemExit:
        line = err.getvalue().strip().splitlines()[-1:] or ["bad options"]
        raise ValueError("EvaldagCallback: " + line[0].removeprefix("evaldag: error: ")) from None


def has_vocab(folder: Path) -> bool:
    return any((folder / n).is_file() for n in _VOCAB) or any(folder.glob("*.model"))


def find_tokenizer(model: Any, tokenizer: Any) -> Any:
    """The tokenizer given, else the one in the model's ``name_or_path`` folder; one line otherwise."""
    if tokenizer is not None:
        return tokenizer
    source = Path(str(getattr(model, "name_or_path", "") or "")).expanduser()
    if str(source) not in ("", ".") and source.is_dir() and has_vocab(source):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(source))
    raise ValueError(f"EvaldagCallback: cannot find the model's tokenizer: the Trainer was given none "
                     f"(processing_class) and the model's folder {str(source) or '(none)'!r} holds none; "
                     f"pass tokenizer=")


def model_folder(model: Any, tokenizer: Any, root: Path, name: str = "model") -> Path:
    """The folder ``--model`` names: the config and the tokenizer, written once (no weights);
    each rank writes its own (ranks on one machine share ``root``)."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


class StepEvaluation:
    """``evaldag run BENCH`` with fixed options, run on the in-memory model at each step."""

    def __init__(self, benchmark: str, options: dict[str, Any], root: Path):
        self.benchmark, self.root = benchmark, Path(root)
        options = {"quiet": True, **options}  # the Trainer's log is the place for numbers
        self.argv = to_argv(options)
        self.args = parse(benchmark, self.argv)
        self.bench = BENCHMARKS.get(benchmark)
        self.group_name = (self.bench.group or self.bench.name).upper()

    def metric_names(self) -> tuple[str, ...]:
        """The metrics this evaluation computes (its --metrics), else the benchmark's whole menu."""
        try:
            return tuple(self.bench.metrics_from_args(self.args)) or tuple(self.bench.metric_menu().all)
        except (ValueError, AttributeError):
            return tuple(self.bench.metric_menu().all)

    def check(self, folder: Path) -> None:
        """Every option and file checked as the CLI checks them, before training starts."""
        args = self.for_folder(folder)
        try:
            check_folders(args.cache_dir, self.root / "step-0")
            configs(args, [self.bench])
        except (OSError, ValueError) as e:
            raise ValueError(f"EvaldagCallback: {config_error(e)}") from None

    def check_serves(self, folder: Path, resource: Any) -> None:
        """What ``resource`` (the in-memory model) cannot serve, refused before training starts,
        in the planner's one line: weights split over ranks serve fewer request kinds."""
        args = self.for_folder(folder)
        try:
            cfg = configs(args, [self.bench])[0]
            nodes, resources = self.bench.build(cfg)
            nodes += added_metrics(args.add_metric, resources, [(self.bench, cfg)])
            plan(Graph(nodes), ResourceSet({**resources, "model": resource}))
        except (GraphError, OSError, ValueError) as e:  # a --fallback folder is not the weights being trained
            line = config_error(e).replace("or add --fallback hf:DIR", "or evaluate the saved checkpoints with the CLI")
            raise ValueError(f"EvaldagCallback: {line}") from None

    def for_folder(self, folder: Path) -> argparse.Namespace:
        return for_model(self.args, str(folder))

    def run(self, folder: Path, resource: Any, step: int, group: Any) -> tuple[int, Path]:
        """One evaluation of ``resource`` (the in-memory model) into ``ROOT/step-<step>/``; the exit code."""
        args = self.for_folder(folder)
        args.in_memory = {"model": resource}
        args.command_line = redact_argv(["evaldag", "run", self.benchmark, *self.argv, "--model", f"<in memory, step {step}>"])
        out = self.root / f"step-{step}"
        return _one(args, [self.bench], group, out, report=True), out

    def summary(self, out: Path) -> dict[str, float]:
        """The headline numbers of a finished step: the SUMMARY's values that are numbers."""
        try:
            data = json.loads((out / f"{self.group_name}_SUMMARY.json").read_text())
        except (OSError, ValueError):
            return {}
        return {k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
