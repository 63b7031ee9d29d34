"""``--attack relearn:...``: the relearning model attack as a transform (``transforms.py``).

The model (and the retain model, the control R is computed with) is fine-tuned on a split of
the run's own data with the recipe of ``relearn.py``, then evaluated by every metric as a
checkpoint is. What this module adds to the training:

* the data: ``split`` names one of the run's data resources (``forget`` is TOFU's
  ``tofu_forget``, MUSE's ``muse_forget`` ...: the resource whose name is the split or ends in
  ``_<split>``), or a JSON / JSON-lines file of ``question``/``answer`` rows (``text`` rows train
  on every token). A split the run does not have is one line naming it and the ones it has,
  before any model loads. The prompt is the run's own template (the ``template`` resource).
* the disjoint variant (``disjoint=true``): the model trains on one half of the split and the run
  scores the split's other half (:meth:`Relearn.scored`), Deeb & Roger's separation of recovered
  knowledge from retraining on the test items.
* the weights: a relearn trains once. Its weights are stored in the running cache
  (``cache/weights.py``; found in a ``--cache-read-from`` layer too, and loaded from there) under the derived model's fingerprint -- the parent's fingerprint, this
  transform's name, version and recipe, the training rows' fingerprint -- a LoRA relearn's adapter
  only. A later run whose answers are cached loads nothing (the executor never asks for the
  model); one that needs new answers loads the stored weights and trains nothing.

The steps a relearn takes are in its identity (``run.json``'s ``derived``) and said on stderr
when it trains.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .adapters.base import PromptTemplate
from .adapters.hf.hf_encoder import HFEncoder
from .cache.weights import CorruptWeights, WeightStore, active_weights
from .relearn import Recipe, RecipeError, RecipeParams, disjoint_halves, encode_rows, lora_model, step_count, train, \
    training_order
from .resources import Rows, hash_rows
from .transforms import Transform, TransformError

__all__ = ["Relearn", "STORED_LOADS"]

STORED_LOADS: list[str] = []  # keys of stored weights loaded instead of trained (tests count them)


def _is_file(split: str) -> bool:
    return split.endswith((".json", ".jsonl")) or "/" in split


def read_rows_file(path: str) -> list[dict]:
    """A JSON array or JSON-lines file of rows, each with ``question``/``answer`` or ``text``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise TransformError(f"--attack relearn: split={path}: no such file")
    text = p.read_text(encoding="utf-8-sig")
    try:
        rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
    except ValueError as e:
        raise TransformError(f"--attack relearn: split={path}: not JSON or JSON lines ({e})") from None
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not (isinstance(r.get("text"), str) or
                                           (isinstance(r.get("question"), str) and isinstance(r.get("answer"), str))):
            raise TransformError(f"--attack relearn: split={path}: row {i} (0-based) has neither question and answer "
                                 "nor text")
    return rows


class Relearn(Transform):
    """Fine-tune on a split of the run's data with a pinned, overridable recipe (see the module)."""

    name = "relearn"
    version = "1"
    Params = RecipeParams
    positional = "split"
    trains = True
    roles = ("model", "retain_model")  # the retain model is relearned the same way: R's control

    _rows: list[dict] | None = None
    _split_key: str | None = None
    _template: Any = None
    _parent: Any = None
    _scored: list[int] | None = None
    _world = 1

    @property
    def recipe(self) -> Recipe:
        return self.params.as_recipe()

    def check(self) -> None:
        if self.params.mode == "lora":
            try:
                import peft  # noqa: F401
            except ImportError:
                raise TransformError(f"--attack {self.text}: mode=lora needs peft: pip install peft") from None

    # -- binding to one run
    def bind(self, resources: dict[str, Any], role: str) -> "Relearn":
        bound = type(self)(self.params, self.text)
        bound._parent = resources.get(role)
        bound._world = int(os.environ.get("WORLD_SIZE", "1") or 1)  # under torchrun: a Trainer job over the ranks
        split = self.params.split
        if _is_file(split):
            rows, bound._split_key = read_rows_file(split), None
        else:
            key = _split_resource(resources, split, self.text)
            bound._split_key = key
            rows = _original(resources[key]).value()
        template = resources.get("template")
        bound._template = template.value() if template is not None else None
        recipe = self.recipe
        if recipe.disjoint:
            trained, scored = disjoint_halves(len(rows), recipe)
            bound._rows, bound._scored = [rows[i] for i in trained], scored
        else:
            bound._rows = [rows[i] for i in training_order(len(rows), recipe)]
        if not bound._rows:
            raise TransformError(f"--attack {self.text}: split {split!r} leaves no rows to train on")
        for i, r in enumerate(rows):
            if not (_qa(r) or isinstance(r.get("text"), str)):
                raise TransformError(f"--attack {self.text}: row {i} (0-based) of {bound._split_key or split} has neither "
                                     f"question and answer nor text (its fields: {', '.join(sorted(r)) or 'none'})")
        return bound

    def scored(self, resources: dict[str, Any]) -> dict[str, Any]:
        """The run's resources with the split the disjoint variant scores: the rows it did not train on."""
        if self._scored is None or self._split_key is None:
            return resources
        parent = _original(resources[self._split_key])
        keep = list(self._scored)
        rows = Rows(lambda: [parent.value()[i] for i in keep], f"{parent.source} (relearn disjoint: the scored half)")
        rows.relearn_original = parent
        return {**resources, self._split_key: rows}

    def data_fingerprint(self) -> str | None:
        if self._rows is None:
            return None
        template = self._template.model_dump(mode="json") if hasattr(self._template, "model_dump") else self._template
        return hash_rows([{"rows": self._rows, "template": template}])

    def identity(self) -> dict:
        out = super().identity()
        out["params"] = self.recipe.fields()  # the recipe in effect: the named one with the fields given over it
        if self._rows is not None:
            out["rows"] = len(self._rows)
            out["steps"] = step_count(len(self._rows), self.recipe, self._world)
            if self._world > 1:  # the effective batch is the ranks' together: other weights
                out["world_size"] = self._world
            if self._scored is not None:
                out["scored_rows"] = len(self._scored)
                out["scored_indices"] = list(self._scored)  # each scored item's row in the split: pairs it with the plain run's
        return out

    # -- the derived weights
    def apply(self, model: Any, tokenizer: Any) -> Any:
        recipe = self.recipe
        key = self.derived_fingerprint(self._parent.fingerprint())
        store = active_weights()  # the running cache's (and through it a --cache-read-from layer's)
        stored = _stored_folder(store, key)
        if stored is not None:
            STORED_LOADS.append(key)
            return _load_stored(model, stored, recipe)
        examples = _examples(HFEncoder(tokenizer), self._rows, self._template, recipe)
        label = self._parent.label() if hasattr(self._parent, "label") else str(self._parent)
        print(f"evaldag: relearn {label}: {len(examples)} rows of {self._split_key or self.params.split}, "
              f"{step_count(len(examples), recipe, self._world)} steps ({recipe.epochs:g} epoch(s), batch {recipe.batch} x "
              f"accumulation {recipe.grad_accum}, lr {recipe.lr:g}, {recipe.mode})", file=sys.stderr)
        if recipe.mode == "lora":
            model = lora_model(model, recipe)
        scratch = Path(tempfile.mkdtemp(prefix="evaldag-relearn-"))
        try:
            mask = getattr(self._parent, "attention_mask", "reference")  # --attention-mask, as the metrics mask
            report = train(model, tokenizer, examples, recipe, str(scratch / "trainer"), mask=mask)
            if store is not None and not store.read_only:
                out = scratch / "weights"
                model.save_pretrained(str(out), safe_serialization=True)
                if recipe.mode == "full":
                    tokenizer.save_pretrained(str(out))
                for p in out.iterdir():
                    if p.suffix == ".md" or not p.is_file():  # PEFT's model card
                        p.unlink() if p.is_file() else shutil.rmtree(p)
                store.put(key, out, {"transform": self.name, "version": self.version, "spec": self.text,
                                     "params": recipe.fields(), "parent": self._parent.fingerprint(),
                                     "data": self.data_fingerprint(), "rows": len(examples), "steps": report.steps,
                                     "losses": report.losses, "train_seconds": round(report.seconds, 3),
                                     "train_cpu_seconds": round(report.cpu_seconds, 3),
                                     "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
                                     "note": "one training run, keyed by its recipe (GPU training is not bit-reproducible)"})
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return model.merge_and_unload() if recipe.mode == "lora" else model


def _stored_folder(store: WeightStore | None, key: str) -> Path | None:
    """The stored relearn's folder, every file checked; None: train. A damaged one (here, or in a
    ``--cache-read-from`` layer, which this run cannot repair) is said in one line and trained again."""
    if store is None or not store.has(key):
        return None
    try:
        return store.checked(key)
    except CorruptWeights as e:
        print(f"evaldag: warning: {e}; the relearn trains again (evaldag cache verify --repair removes a damaged "
              "folder)", file=sys.stderr)
        return None


def _original(rows: Any) -> Any:
    """The split as the benchmark made it (a disjoint run's scored half remembers it)."""
    return getattr(rows, "relearn_original", rows)


def _split_resource(resources: dict[str, Any], split: str, text: str) -> str:
    """The run's data resource ``split`` names: itself, the one a benchmark says answers to it
    (``Rows.also``: MUSE's forget corpus is its ``forget``), or the one ending in ``_<split>``."""
    data = {k: v for k, v in resources.items() if isinstance(v, Rows)}
    if split in data:
        return split
    named = [k for k, v in data.items() if split in getattr(_original(v), "also", ())]
    hits = named or [k for k in data if k.endswith("_" + split)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise TransformError(f"--attack {text}: split {split!r} names several of this run's data ({', '.join(hits)}); "
                             "give the full name")
    short = lambda k: k.split("_", 1)[1] if "_" in k else k  # noqa: E731 - tofu_forget -> forget
    also = {a: short(k) for k, v in data.items() for a in getattr(_original(v), "also", ())}
    default = RecipeParams.model_fields["split"].default
    names = sorted({*map(short, data), *also})
    shown = [f"{n} ({also[n]}{', the default' if n == default else ''})" if n in also else n for n in names]
    close = difflib.get_close_matches(split, names, n=1)
    raise TransformError(f"--attack {text}: this run has no data split {split!r}"
                         + (f"; did you mean {close[0]}?" if close else "")
                         + f" (its splits: {', '.join(shown) or 'none'}; or give a .json/.jsonl file)")


def _qa(row: dict) -> bool:
    return isinstance(row.get("question"), str) and isinstance(row.get("answer"), str)


def _examples(encoder: Any, rows: list[dict], template: Any, recipe: Recipe) -> list[dict]:
    """Question/answer rows learn their answer through the run's template; ``text`` rows (a corpus)
    learn every token, as a pretraining step."""
    template = template if template is not None else PromptTemplate.plain()
    out = []
    for r in rows:
        if _qa(r):
            out += encode_rows(encoder, [r], template, recipe)
            continue
        enc = encoder.encode_completion("", r["text"], max_length=recipe.max_length)
        ids = list(enc.context_ids) + list(enc.continuation_ids)
        out.append({"input_ids": ids, "labels": [-100] * len(enc.context_ids) + list(enc.continuation_ids)})
    return out


def _load_stored(model: Any, folder: Path, recipe: Recipe) -> Any:
    """``model`` (the parent's weights) with the stored relearn's weights in it."""
    if recipe.mode == "lora":
        from peft import PeftModel

        return PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    from safetensors.torch import load_file

    state: dict = {}
    for p in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(p)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {k for k in missing if k.endswith("lm_head.weight")}
    if unexpected or set(missing) - tied:
        raise RecipeError(f"stored relearn {folder}: its tensors do not fit the model "
                          f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})")
    return model
