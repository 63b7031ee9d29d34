"""``--base-model``: the original checkpoint that ``--model`` was edited or unlearned from.

One flag and one ``base_model`` resource for every benchmark that reads it -- the editing
benchmark's ``*_base`` entries and weight deltas, TOFU's and MUSE's ``nf4_changed_fraction``
-- so ``evaldag run tofu editing --base-model DIR`` gives both the same resource: it is
built here the same way for each (the editing benchmark's masking, ``--model``'s tokenizer).
"""

from __future__ import annotations

from typing import Any

from ..engine.adapters import spec as specs
from ..engine.adapters.hf_weights import check_model_dirs
from ..engine.option_owners import add_shared
from . import common

HELP = ("the original checkpoint --model was edited or unlearned from: a folder, hf:DIR|ID, or another backend's spec "
        "(openai:URL; it shares --model's --tokenizer). EDITING: its *_base entries and weight deltas; "
        "TOFU, MUSE: nf4_changed_fraction")


def add_base_model_argument(p: Any) -> None:
    """One declaration shared by every benchmark of the command that asks (``engine/option_owners.py``)."""
    add_shared(p, "--base-model", default=None, help=HELP)


def base_model_resource(path: str, dtype: str, device: str, tokenizer: str | None = None,
                        settings: dict[str, Any] | None = None) -> Any:
    """The lazy ``base_model`` (no weights load here), with the editing benchmark's padding-only mask;
    ``settings``: its own ``--model-arg base:KEY=VALUE`` pairs, over ``--model``'s tokenizer."""
    given = {**({"tokenizer": tokenizer} if tokenizer else {}), **(settings or {})}
    opts = common.ModelOptions(dtype=dtype, device=device, attention_mask="padding",
                               backend_options={"model": given} if given else {})
    return common.hf_model(path, opts, "--base-model")


def check_weights_readable(model: str, base_model: str, reading: str) -> None:
    """Both checkpoints are local ``hf`` folders of one architecture and shapes (file headers
    only); else one ValueError naming the flag and what ``reading`` needs."""
    folders = []
    for flag, path in (("--base-model", base_model), ("--model", model)):
        parsed = specs.parse(path, flag)
        if parsed.scheme != "hf":
            raise ValueError(f"{reading} reads both checkpoints' weights, and {flag} {path} is a server model whose "
                             "weights are not here: give its checkpoint folder (hf:DIR)")
        folders.append(common.checkpoint_folder(parsed.target, flag))
    if all(folders):
        check_model_dirs(*folders)
