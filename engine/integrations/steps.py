"""One benchmark evaluated again and again on a model that changes: the callback's engine.

:class:`StepEvaluation` reads the callback's keyword arguments as the options of
``evaldag run BENCH --flag value ...`` (``options.py``, the run's one parse step: every
option has the same name, default and check as on the command line), validates them once
before training starts, and then, at each step, runs the library's one-run driver
(``session.run_benchmarks``: the same graph, planner, executor, cache, outputs and run log)
with the Trainer's in-memory model as the ``model`` resource. The retain and reference
models are ordinary folders: their nodes and requests are cached at the first step and only
read afterwards.

The config's ``model`` still names a folder, the one the tokenizer and config are read from
(the chat-template and side-model checks read files): the model's own ``name_or_path`` when
it holds a tokenizer, else ``OUTPUT_DIR/evaldag/model/`` with the config and the tokenizer
the Trainer was given (no weights). The benchmark is found through the registry; the
engine imports no benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import io
import json
from pathlib import Path
from typing import Any

from .. import options as run_options
from ..benchmark import pareto_of
from ..graph import GraphError
from ..redact import redact_argv
from ..registry import BENCHMARKS
from ..session import check_folders, check_serves, config_error, run_benchmarks

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
    """``evaldag run BENCH ARGV``'s parser on ``ARGV``; its one error line as a ValueError."""
    if benchmark not in BENCHMARKS:
        close = difflib.get_close_matches(benchmark, BENCHMARKS.names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(BENCHMARKS.names())}"
        raise ValueError(f"EvaldagCallback: unknown benchmark {benchmark!r}{hint}")
    parser = run_options.Parser(prog="evaldag run")
    parser.set_defaults(benchmarks=[benchmark])
    run_options.add_run_arguments(parser, [BENCHMARKS.get(benchmark)])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv)
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
        self._args = parse(benchmark, self.argv)  # read only by options.py
        self._parsed: run_options.Parsed | None = None
        self.bench = BENCHMARKS.get(benchmark)
        self.group_name = (self.bench.group or self.bench.name).upper()

    @property
    def parsed(self) -> run_options.Parsed:
        """The options and the benchmark's config, typed (read once; OSError / ValueError)."""
        if self._parsed is None:
            self._parsed = run_options.read(self._args, [self.bench])
        return self._parsed

    @property
    def bench_pareto(self) -> tuple | None:
        """A bare ``pareto`` rule's axes: the benchmark's trade-off (``Benchmark.tradeoff``)."""
        return pareto_of([self.bench])

    @property
    def cache_dir(self) -> str | None:
        return self.parsed.options.cache_dir

    @property
    def attention_mask(self) -> str:
        return getattr(self.parsed.configs[0], "attention_mask", "reference")

    def metric_names(self) -> tuple[str, ...]:
        """The metrics this evaluation computes (its metrics=), else the benchmark's whole menu."""
        return run_options.metric_names(self.bench, self._args)

    def configs(self, folder: Path) -> list[Any]:
        """The benchmark's config with ``folder`` as its model."""
        return [self.bench.for_model(self.parsed.configs[0], str(folder))]

    def check(self, folder: Path) -> None:
        """Every option and file checked as the CLI checks them, before training starts."""
        try:
            check_folders(self.parsed.options.cache_dir, self.root / "step-0")
            self.configs(folder)
        except (OSError, ValueError) as e:
            raise ValueError(f"EvaldagCallback: {config_error(e)}") from None

    def check_serves(self, folder: Path, resource: Any) -> None:
        """What ``resource`` (the in-memory model) cannot serve, refused before training starts,
        in the planner's one line: weights split over ranks serve fewer request kinds."""
        try:
            check_serves([self.bench], self.configs(folder),
                         dataclasses.replace(self.parsed.options, resources={"model": resource}))
        except (GraphError, OSError, ValueError) as e:  # a --fallback folder is not the weights being trained
            line = config_error(e).replace("or add --model-arg fallback=hf:DIR", "or evaluate the saved checkpoints with the CLI")
            raise ValueError(f"EvaldagCallback: {line}") from None

    def run(self, folder: Path, resource: Any, step: int, group: Any) -> tuple[int, Path]:
        """One evaluation of ``resource`` (the in-memory model) into ``ROOT/step-<step>/``; the exit code."""
        out = self.root / f"step-{step}"
        command = redact_argv(["evaldag", "run", self.benchmark, *self.argv, "--model", f"<in memory, step {step}>"])
        options = dataclasses.replace(self.parsed.options, out=out, resources={"model": resource}, command=tuple(command))
        return run_benchmarks([self.bench], self.configs(folder), options, group).code, out

    def summary(self, out: Path) -> dict[str, float]:
        """The headline numbers of a finished step: the SUMMARY's values that are numbers."""
        try:
            data = json.loads((out / f"{self.group_name}_SUMMARY.json").read_text())
        except (OSError, ValueError):
            return {}
        return {k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
