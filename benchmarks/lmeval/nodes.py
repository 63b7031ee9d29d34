"""The lmeval graph: one scorer that runs lm-evaluation-harness, one entry per reported metric.

``lm_eval`` (the scorer) calls lm-evaluation-harness's ``simple_evaluate`` on an
:class:`~.lm.EvaldagLM` whose requests it yields to the run's executor (``bridge.py``);
its value is ``simple_evaluate``'s dict (``results``, ``configs``, ``versions``,
``n-shot``, ``higher_is_better``, ...) and the logged samples per task, JSON-safe so the
node store keeps them. Its params hold everything that changes the numbers: the tasks
and a digest of their files, few-shot, limit, the chat template, and the tokenization
settings (lm-evaluation-harness version, ``add_bos_token``, prefix token) that decide
every request's ids -- so they are in its fingerprint and in run.json.

``lm_eval_entry`` reads one (task or group, metric, filter) out of that dict as a
``Result``: the value, its stderr, and for a task the per-document scores.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import subprocess
import types
from typing import Any

import numpy as np

from ...engine import Params, Result, metric
from .bridge import bridged


class LmevalParams(Params):
    tasks: tuple[str, ...]
    include_path: str | None = None
    task_digest: str = ""
    num_fewshot: int | None = None
    limit: float | None = None
    bootstrap_iters: int = 100000  # lm-evaluation-harness's default
    chat: bool = False  # --template chat: its --apply_chat_template
    system_prompt: str | None = None  # its --system_instruction
    lm_eval_version: str = ""
    add_bos_token: bool | None = None  # None: the tokenizer's own default (HFLM's)
    prefix_token_id: int | None = None  # None: HFLM's (bos, else eos)
    seed: int = 0  # simple_evaluate's random_seed; numpy, torch and few-shot seeds stay at its 1234


class EntryParams(Params):
    task: str
    metric: str
    filter: str = "none"


def plain(x: Any) -> Any:
    """JSON-safe: str keys, lists, numbers (NaN kept as None), everything else as its str."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [plain(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if hasattr(x, "item") and callable(x.item):  # numpy / torch scalars
        try:
            return plain(x.item())
        except (TypeError, ValueError):
            pass
    if hasattr(x, "tolist"):
        return plain(x.tolist())
    return str(x)


@contextlib.contextmanager
def one_process_view():
    """lm-evaluation-harness as one process, whatever torchrun set: under torchrun its
    ``simple_evaluate`` returns results only where ``LOCAL_RANK`` is 0, but evaldag shards
    the *requests* in its executor, so every rank must build the same requests and read the
    same results (rank 0 alone writes the files). Only lm-eval's evaluator sees the view."""
    import lm_eval.evaluator as ev

    real, real_hash = ev.os, getattr(ev, "get_git_commit_hash", None)
    view = types.ModuleType("os")
    view.__dict__.update(real.__dict__)
    view.environ = {**real.environ, "LOCAL_RANK": "0"}
    ev.os = view
    if real_hash is not None:  # its probe of the working directory printed "fatal: not a git repository" on every run
        ev.get_git_commit_hash = _quiet_git_hash
    try:
        yield
    finally:
        ev.os = real
        if real_hash is not None:
            ev.get_git_commit_hash = real_hash


@contextlib.contextmanager
def third_party_bars_off():
    """lm-evaluation-harness's tqdm bars (one per task while it builds requests, "Tokenizing inputs")
    and datasets' ("Generating test split") off while ``simple_evaluate`` runs: they would interleave
    with evaldag's own lines, whose bars count the same requests as the executor serves them.
    Only lm-evaluation-harness's modules get a muted tqdm; evaldag's bars are untouched."""
    import importlib

    patched = []
    for name in ("lm_eval.api.task", "lm_eval.api.model", "lm_eval.api.metrics"):
        mod = importlib.import_module(name)
        if hasattr(mod, "tqdm"):
            original = mod.tqdm
            patched.append((mod, original))
            mod.tqdm = lambda *a, _bar=original, **kw: _bar(*a, **{**kw, "disable": True})
    try:
        from datasets.utils import logging as ds_logging
    except ImportError:  # pragma: no cover - lm-evaluation-harness depends on datasets
        ds_logging = None
    was_on = ds_logging is not None and ds_logging.is_progress_bar_enabled()
    if was_on:
        ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        for mod, original in patched:
            mod.tqdm = original
        if was_on:
            ds_logging.enable_progress_bar()


def _quiet_git_hash() -> str | None:
    """lm-evaluation-harness's ``git_hash`` (``git describe --always`` in the working directory),
    the same value without git's complaint on stderr outside a repository."""
    try:
        return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()
    except (subprocess.CalledProcessError, FileNotFoundError, OSError):
        return None


def evaluate(model: Any, params: LmevalParams, serve: Any) -> dict:
    """lm-evaluation-harness's ``simple_evaluate`` with evaldag serving the requests."""
    import lm_eval

    from .lm import EvaldagLM
    from .tasks import task_manager

    lm = EvaldagLM(model=model, serve=serve, add_bos_token=params.add_bos_token,
                   prefix_token_id=params.prefix_token_id)
    limit = params.limit
    if limit is not None and float(limit).is_integer() and limit >= 1:
        limit = int(limit)
    log = logging.getLogger("lm_eval")
    level = log.level
    log.setLevel(logging.ERROR)  # its per-task notes (default aggregations, ...) would bury evaldag's summary
    try:
        with one_process_view(), third_party_bars_off():
            out = lm_eval.simple_evaluate(
                model=lm, tasks=list(params.tasks), task_manager=task_manager(params.include_path, params.tasks),
                num_fewshot=params.num_fewshot, limit=limit, bootstrap_iters=params.bootstrap_iters, log_samples=True,
                apply_chat_template=params.chat, system_instruction=params.system_prompt, fewshot_as_multiturn=params.chat,
                random_seed=params.seed)
    finally:
        log.setLevel(level)
    samples = out.pop("samples", None) or {}
    return {"results": plain(out), "samples": {task: _jsonl(rows) for task, rows in samples.items()},
            "identity": plain(lm.identity())}


def _jsonl(rows: list) -> np.ndarray:
    """A task's samples as the bytes of their JSON lines: kept among the entry's arrays, not in
    its JSON header (MMLU's samples, prompts included, are over a hundred megabytes)."""
    text = "".join(json.dumps(plain(r), ensure_ascii=False, allow_nan=False) + "\n" for r in rows)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def samples_text(run: dict, task: str) -> str:
    """The JSON lines of ``task``'s samples ('' when it has none: a group)."""
    data = (run.get("samples") or {}).get(task)
    return bytes(np.asarray(data, dtype=np.uint8)).decode("utf-8") if data is not None else ""


def samples_of(run: dict, task: str) -> list[dict]:
    return [json.loads(line) for line in samples_text(run, task).splitlines() if line.strip()]


@metric("lm_eval", version="1", params=LmevalParams, needs=("model",),
        requests={"model": {"token_stats": ("logprob", "argmax"), "generate": ()}})
def lm_eval_scorer(model: Any, params: LmevalParams):
    """simple_evaluate's results and samples; every forward pass served by the executor."""
    return (yield from bridged(lambda serve: evaluate(model, params, serve)))


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


@metric("lm_eval_entry", version="1", params=EntryParams, parents={"run": "lm_eval"})
def lm_eval_entry(run: dict, params: EntryParams) -> Result:
    """One metric of one task or group: value, stderr, sample count; a task's per-document scores."""
    res = run["results"]
    key = f"{params.metric},{params.filter}"
    got = (res.get("results") or {}).get(params.task) or {}
    extra = {"task": params.task, "metric": params.metric, "filter": params.filter,
             "stderr": _number(got.get(f"{params.metric}_stderr,{params.filter}")),
             "higher_is_better": (res.get("higher_is_better") or {}).get(params.task, {}).get(params.metric),
             "n_samples": ((res.get("n-samples") or {}).get(params.task) or {}).get("effective")}
    value = _number(got.get(key))
    if value is None:
        return Result.nan(f"lm-evaluation-harness reported no {key} for {params.task}", **extra)
    vbi = None
    docs = [s for s in samples_of(run, params.task) if s.get("filter", "none") == params.filter]
    scores = {str(s["doc_id"]): _number(s.get(params.metric)) for s in docs}
    if docs and all(v is not None for v in scores.values()):
        vbi = {k: {"score": v} for k, v in scores.items()}
    return Result(value, vbi, extra=extra)


def entry_name(task: str, metric_name: str, flt: str) -> str:
    """The EVAL/SUMMARY name of an entry: ``task.metric`` (``task.metric,filter`` for a filter but none)."""
    return f"{task}.{metric_name}" + ("" if flt == "none" else f",{flt}")


def dumps(x: Any) -> str:
    return json.dumps(x, indent=2, sort_keys=False, allow_nan=False, ensure_ascii=False)
