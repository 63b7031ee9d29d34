"""``EvaldagCallback``: evaluate the model while it trains, through the CLI's own machinery.

::

    cb = EvaldagCallback.for_trainer(trainer, "tofu", data="TOFU/", retain_model="retain/",
                                     metrics=["forget_Q_A_Prob", "forget_quality"], on_save=True)
    trainer.train()

Keyword arguments are ``evaldag run BENCH``'s options by name (``retain_model=`` is
``--retain-model``); they are checked as the CLI checks them when the callback is attached
(or at ``on_train_begin``), so a typo fails before the first step. At each chosen step
(``every_n_steps=N`` and/or ``on_save=True``) the in-memory model is evaluated
(``steps.py``), its files written to ``OUTPUT_DIR/evaldag/step-<N>/``, and the SUMMARY's
numbers handed to ``trainer.log`` as ``evaldag/<name>``, so TensorBoard, W&B or any
reporter already configured receives them (a callback is handed no Trainer and runs after
the reporting callbacks: hence :meth:`attach`). Without a Trainer it still evaluates and
writes its files.

The model's fingerprint hashes its tensors at that step, so it cannot go stale. When the
Trainer saves ``checkpoint-N`` right after an evaluation of step N, the saved tensors are
compared with the in-memory ones and, if equal, the folder's fingerprint is recorded as an
alias of the in-memory one (``cache/aliases.py``): ``evaldag run --model checkpoint-N``
later finds every node cached.

Under several processes (DDP: ``torchrun``, accelerate) the job's process group is joined,
never re-made nor destroyed; each rank forwards a share of the batches, rank 0 writes, and
the numbers are broadcast so every rank logs and decides alike. Weights split over the
ranks (FSDP, FSDP2, DeepSpeed ZeRO-3) are evaluated in place: every rank takes part in
every forward pass (``distributed/lockstep.py``), and the check of a saved checkpoint
gathers the whole model on rank 0.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator

from transformers import TrainerCallback

from ..adapters.hf import HFModel
from .. import selection
from ..cache import Cache, aliases
from ..cache.files import atomic_write
from ..distributed import Group
from ..distributed import lockstep
from ..sweepdir import SWEEP_FILE, comparison, sweep_record
from .steps import StepEvaluation, find_tokenizer, model_folder
from .tensors import same_tensors

_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def job_group() -> Any:
    """The training job's process group as the engine's Group (joined, not made), or None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return None
    return Group()


class EvaldagCallback(TrainerCallback):
    """Evaluates the in-memory model every ``every_n_steps`` steps and/or at each save."""

    def __init__(self, benchmark: str, *, every_n_steps: int | None = None, on_save: bool = False,
                 tokenizer: Any = None, output_dir: str | None = None, select: str | None = None,
                 stop_when: str | None = None, **options: Any):
        if every_n_steps is not None and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"EvaldagCallback: every_n_steps must be a positive integer, not {every_n_steps!r}")
        if not every_n_steps and not on_save:
            raise ValueError("EvaldagCallback: say when to evaluate: every_n_steps=N and/or on_save=True")
        self.every_n_steps, self.on_save_eval = every_n_steps, on_save
        self.tokenizer, self.output_dir, self.trainer = tokenizer, output_dir, None
        self.evaluation = StepEvaluation(benchmark, options, Path(output_dir or ".") / "evaldag")
        self.select, self.stop_when = select, _stop_rule(stop_when)
        if select:  # the sweep's --select rule, its names checked against the metrics this run computes
            try:
                selection.check_names(selection.parse(select), sorted(self.evaluation.metric_names()))
            except selection.RuleError as e:
                raise ValueError(f"EvaldagCallback: {str(e).replace('--select ', 'select=', 1)}") from None
        self.selected: dict | None = None  # the latest choice of ``select`` over the steps so far
        self.history: list[dict[str, Any]] = []  # one row per evaluated step (step, folder, summary, fingerprint)
        self._folder: Path | None = None
        self._group: Any = None
        self._sharded: str | None = None  # "fsdp", "fsdp2", "zero3": the weights are split over the ranks
        self._last: tuple[int, str] | None = None  # (step, in-memory fingerprint) of the latest evaluation

    @classmethod
    def for_trainer(cls, trainer: Any, benchmark: str, **kw: Any) -> "EvaldagCallback":
        """A callback attached to ``trainer`` and added to its callbacks."""
        cb = cls(benchmark, **kw)
        cb.attach(trainer)
        trainer.add_callback(cb)
        return cb

    def attach(self, trainer: Any) -> "EvaldagCallback":
        """Report through ``trainer.log``; check every option and find the tokenizer now."""
        self.trainer = trainer
        if self.tokenizer is None:
            self.tokenizer = getattr(trainer, "processing_class", None) or getattr(trainer, "tokenizer", None)
        self._prepare(trainer.args, trainer.model)
        return self

    def _prepare(self, args: Any, model: Any) -> None:
        if self._folder is not None:
            return
        if self.output_dir is None:  # the Trainer's output folder, known once it is
            self.evaluation.root = Path(args.output_dir) / "evaldag"
        self.tokenizer = find_tokenizer(model, self.tokenizer)
        self._group = job_group()
        rank = self._group.rank if self._group is not None else 0
        try:  # before the first step: a folder that cannot be written is refused now, in one line
            self._folder = model_folder(model, self.tokenizer, self.evaluation.root, "model" if rank == 0 else f".model-rank{rank}")
        except OSError as e:
            raise ValueError(f"EvaldagCallback: cannot write {self.evaluation.root}: {e.strerror or e}") from None
        self.evaluation.check(self._folder)
        self._note_sharding(model)

    def _note_sharding(self, model: Any) -> None:
        """Whether the weights are split over the ranks now: the Trainer shards (FSDP, ZeRO-3)
        inside ``train()``, after ``attach``, so this is asked again at ``on_train_begin`` and at
        each evaluation. A metric sharded weights cannot serve is refused once, in one line."""
        kind = lockstep.sharding(model) if self._group is not None else None
        if kind and kind != self._sharded:
            self._sharded = kind
            self.evaluation.check_serves(self._folder, self._resource(model, "in-memory", "unhashed"))
        self._sharded = kind

    # -- the Trainer's events
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None, **kw: Any):
        if self.tokenizer is None:
            self.tokenizer = processing_class or kw.get("tokenizer")
        self._prepare(args, model)
        self._note_sharding(model)  # the Trainer has wrapped the model by now

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        if self.every_n_steps and state.global_step % self.every_n_steps == 0:
            with goes_on(state.global_step):  # the last net under the protected writes and exchanges
                self._stop(control, self.evaluate(model, state.global_step))

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        step = state.global_step
        if self.on_save_eval and (self._last is None or self._last[0] != step):
            with goes_on(step):
                self._stop(control, self.evaluate(model, step))
        if self._last is None or self._last[0] != step:
            return
        with goes_on(step):
            # sharded weights: gathering the whole model is a collective, so every rank takes part
            whole = lockstep.full_state_dict(model) if self._sharded else None
            if state.is_world_process_zero:
                self.alias_checkpoint(Path(args.output_dir) / f"checkpoint-{step}", model, self._last[1], whole)

    # -- the work
    def evaluate(self, model: Any, step: int) -> dict[str, float]:
        """Evaluate ``model`` as it is now as step ``step``; returns (and logs) the headline numbers."""
        if self._folder is None:
            raise ValueError("EvaldagCallback: not prepared; call attach(trainer) or let the Trainer start")
        self._note_sharding(model)
        digest = lockstep.weights_digest(model, self._group) if self._sharded else None
        resource = self._resource(model, f"in-memory@step-{step}", digest)
        was_training = model.training
        code, out = 2, self.evaluation.root / f"step-{step}"
        try:
            with goes_on(step):
                code, out = self.evaluation.run(self._folder, resource, step, self._group)
        finally:
            model.train(was_training)
        numbers = self.evaluation.summary(out) if self._is_writer() else {}
        if self._group is not None:  # every rank logs and decides on rank 0's numbers
            mine, numbers = numbers, {}
            with goes_on(step):
                numbers = json.loads(self._group.broadcast_bytes(json.dumps(mine).encode(), "the step's numbers"))
        if code not in (0, 1):
            print(f"evaldag: warning: the evaluation at step {step} failed (exit {code}); training goes on",
                  file=sys.stderr)
        self._last = (step, resource.fingerprint())
        self.history.append({"step": step, "folder": str(out), "exit": code, "summary": numbers})
        logs = {f"evaldag/{k}": v for k, v in numbers.items()}
        if self.select and any(h["summary"] for h in self.history):
            with goes_on(step):
                self.selected = selection.select(self.select, [(f"step-{h['step']}", h["summary"]) for h in self.history]).to_json()
                picked = [int(n.removeprefix("step-")) for n in self.selected["checkpoints"]]
                if len(picked) == 1:
                    logs["evaldag/selected_step"] = picked[0]
        if self._is_writer():
            with goes_on(step):
                self._write_sweep()
        if self.trainer is not None and logs:
            self.trainer.log(logs)
        return numbers

    def _resource(self, model: Any, name: str, digest: str | None) -> HFModel:
        if self._sharded:  # the planner's messages then say why a kind is missing
            name += f" ({self._sharded}: weights sharded over {self._group.world} ranks)"
        return HFModel.from_pretrained_objects(model, self.tokenizer, name=name, sharded=self._sharded,
                                               attention_mask=self.evaluation.args.attention_mask, weights_digest=digest)

    def _stop(self, control: Any, numbers: dict[str, float]) -> None:
        """``stop_when``: end training once the latest evaluation meets every condition."""
        if self.stop_when and selection.holds(self.stop_when, numbers):
            control.should_training_stop = True
            self.history[-1]["stopped"] = True

    def _write_sweep(self) -> None:
        """``ROOT/sweep.json``: the steps as a sweep's checkpoints, so ``evaldag report ROOT`` reads
        them as one sweep (step order, comparison table, ``selected``)."""
        names = [f"step-{h['step']}" for h in self.history]
        root = self.evaluation.root
        record = sweep_record(names, [f"<in memory, step {h['step']}>" for h in self.history],
                              [self.evaluation.benchmark], comparison([(n, root / n) for n in names]))
        for row, h in zip(record["checkpoints"], self.history):
            row.update(step=h["step"], step_from="callback")
        if self.selected is not None:
            record["selected"] = self.selected
        atomic_write(root / SWEEP_FILE, (json.dumps(record, indent=2) + "\n").encode())

    def alias_checkpoint(self, folder: Path, model: Any, memory_fp: str, whole: dict | None = None) -> bool:
        """Record that the saved ``folder`` holds the evaluated weights (checked tensor by tensor
        against ``whole``, the gathered state dict of sharded weights, else the model's own)."""
        if not folder.is_dir() or not same_tensors(folder, model.state_dict() if whole is None else whole):
            warnings.warn(f"EvaldagCallback: {folder} was not recorded as the evaluated weights "
                          "(no safetensors there, or its tensors differ from the model's)", stacklevel=2)
            return False
        if not any((folder / n).is_file() for n in ("tokenizer.json", "vocab.json", "tokenizer_config.json")):
            self.tokenizer.save_pretrained(str(folder))  # the CLI needs it to read the checkpoint
        cache = Cache(self.evaluation.args.cache_dir)
        if cache.read_only:
            return False
        dtype = _DTYPES.get(str(model.dtype).replace("torch.", ""), "auto")
        with cache.filehash.active():  # the files hashed once, here: the later CLI run costs a stat
            saved = HFModel(str(folder), dtype=dtype, attention_mask=self.evaluation.args.attention_mask).fingerprint()
        if saved != memory_fp:
            aliases.record(cache.root, saved, memory_fp, str(folder))
        return True

    def _is_writer(self) -> bool:
        return self._group is None or self._group.is_writer


@contextlib.contextmanager
def goes_on(step: int) -> Iterator[None]:
    """Nothing the callback does may end training: a write that fails (a full disk, a file
    where a folder goes) or an exchange between ranks that fails is one warning line, and the
    Trainer carries on; what the step could not write is missing, the next step tries again.
    The warnings the failed work raised on its way (a memo not updated, ...) are folded into
    that line; work that succeeds shows its warnings as usual."""
    with warnings.catch_warnings(record=True) as seen:
        try:
            yield
            failed = None
        except Exception as e:  # noqa: BLE001 - a training run outweighs any one evaluation's files
            failed = e
    if failed is None:
        for w in seen:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        return
    why = str(failed) if isinstance(failed, (OSError, ValueError)) else f"{type(failed).__name__}: {failed}"
    print(f"evaldag: warning: EvaldagCallback at step {step}: {(why.strip() or type(failed).__name__).splitlines()[0]}; "
          "training goes on", file=sys.stderr)


def _stop_rule(text: str | None) -> tuple | None:
    if not text:
        return None
    try:
        return selection.parse_conditions(text)
    except selection.RuleError:
        raise ValueError(f"EvaldagCallback: stop_when={text!r}: expected NAME OP NUMBER [and ...], "
                         "OP one of >= <= > < == !=") from None
