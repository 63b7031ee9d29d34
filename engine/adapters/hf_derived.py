"""An ``hf:`` model made by a transform from another (``engine/transforms.py``): a model of its own.

:func:`derive` wraps a lazy :class:`~.hf.HFModel` (a folder, a hub id, a PEFT adapter, an
in-memory model) and a transform into a resource of the parent's own class, so every
handler, capability and check of the ``hf`` backend serves it unchanged. What differs:

* the fingerprint: the parent's fingerprint, the transform's name, version and parameters
  (and its data's fingerprint when it trains): its requests and nodes are cached apart
  from the parent's, and computed once;
* ``load``: a private copy of the parent's weights (read again from its files, a deep copy
  of an in-memory model, or an adapter merged into a freshly loaded base, never the process's
  shared base), handed to ``transform.apply``; the parent's own loaded model is never touched;
* ``describe``: the parent's description with ``derived`` (the transform's identity and the
  parent's fingerprint) for run.json; ``weights_fingerprint``: None (no file holds these weights).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

from .hf import ADAPTER_CLASS, DERIVE, HFModel
from .hf_adapter import HFAdapter

_CLASSES: dict[type, type] = {}


class DerivedMixin:
    """What a derived model changes of its parent's class (see the module's text)."""

    parent: Any
    transform: Any
    role: str

    def _compute_fingerprint(self) -> str:
        parent_fp = self.parent.fingerprint()
        self._snapshot = self.parent._snapshot  # the parent's files: checked before loading, as the parent's are
        return self.transform.derived_fingerprint(parent_fp)

    def weights_fingerprint(self) -> str | None:
        return None

    def capabilities(self) -> Any:
        return self.transform.capabilities(self.parent.capabilities())

    def verify_unchanged(self) -> None:
        self.parent.verify_unchanged()

    def describe(self) -> dict:
        out = self.parent.describe()
        out["derived"] = {"parent": self.parent.fingerprint(), "transform": self.transform.identity(),
                          "spec": self.transform.spec()}
        if self._adapter is not None:
            model = self._adapter.model
            out.update(loaded_dtype=str(model.dtype).replace("torch.", ""), loaded_device=str(model.device))
        return out

    def label(self) -> str:
        return f"{self.parent.label()} [{self.transform.text}]"

    def load(self) -> HFAdapter:
        if self._adapter is not None:
            return self._adapter
        self.fingerprint()
        self.verify_unchanged()
        model, tokenizer = _private_copy(self.parent)
        model = self.transform.apply(model, tokenizer)
        self._adapter = HFAdapter(model.eval(), tokenizer, attention_mask=self.attention_mask)
        return self._adapter


def derive(parent: HFModel, transform: Any, role: str = "model") -> HFModel:
    """The lazy derived model of ``parent`` under ``transform`` (nothing loads here)."""
    if getattr(parent, "sharded", None):
        raise ValueError(f"{transform.text}: {parent.label()} is split over ranks ({parent.sharded}); "
                         "a model attack needs its whole weights")
    base = type(parent)
    cls = _CLASSES.get(base)
    if cls is None:
        cls = _CLASSES[base] = type(f"Derived{base.__name__}", (DerivedMixin, base), {})
    obj = object.__new__(cls)
    obj.__dict__.update(parent.__dict__)
    obj.parent, obj.transform, obj.role = parent, transform, role
    obj._adapter, obj._fp, obj._snapshot = None, None, None
    obj.name = f"{parent.name} [{transform.text}]"
    return obj


def _private_copy(parent: HFModel) -> tuple[Any, Any]:
    """A torch model holding ``parent``'s weights that nobody else holds, and its tokenizer."""
    if getattr(parent, "_objects", None) is not None:  # in memory: a deep copy, the original stays as it is
        model, tokenizer = parent._objects
        return copy.deepcopy(model), parent.encoder().tokenizer
    fresh = copy.copy(parent)
    if not isinstance(parent, DerivedMixin) and ADAPTER_CLASS and isinstance(parent, ADAPTER_CLASS[0]):
        # a PEFT adapter: merged into a base of its own, never the process's shared one
        base = copy.copy(parent.base)
        base._adapter = None
        model = base.load().model
        from peft import PeftModel

        with warnings.catch_warnings():  # peft calls a method transformers deprecates: its notice, not ours
            warnings.filterwarnings("ignore", ".*is_gradient_checkpointing.*", FutureWarning)
            merged = PeftModel.from_pretrained(model, str(Path(parent.path).expanduser())).merge_and_unload()
        return merged, parent.encoder().tokenizer
    fresh._adapter = None
    return fresh.load().model, parent.encoder().tokenizer


DERIVE.append(derive)
