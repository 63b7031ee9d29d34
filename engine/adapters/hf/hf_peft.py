"""A PEFT adapter (LoRA …) over a base checkpoint, as one model resource: :class:`HFPeftModel`.

An adapter folder holds ``adapter_config.json`` (which names the base model in
``base_model_name_or_path``) and ``adapter_model.safetensors``; it computes nothing
without its base. So its fingerprint is the base's fingerprint plus the hashes of the
adapter's own files, config included: ``lora_alpha`` scales every delta, and a fingerprint
that ignored it served one adapter's numbers for another's.

Loading: the base is loaded once per process and kept (:data:`_BASE`); each adapter is
added to it with peft's ``load_adapter`` and made current with ``set_adapter`` before each
of its batches, never merged into the shared weights. A sweep of fifty adapters over one
base loads the base once. Only one base is kept: asking for another frees the first (a
sweep runs adapters grouped by base, ``sweep_plan.py``), and an adapter whose resource is
gone is deleted from the base when the next one loads.

The tokenizer is the adapter folder's when it has one, else the base's. ``peft`` is an
optional dependency (``pip install 'evaldag[peft]'``); torch, transformers and peft are
imported inside functions only.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import warnings
import weakref
from pathlib import Path
from typing import Any

from ...cache.filehash import file_sha256
from ..chat_quirks import folder_facts, model_facts
from . import ADAPTER_CLASS, ADAPTER_CONFIG, HFModel, _check_rows, _digest, _ensure_pad, is_adapter_dir
from .hf_adapter import HFAdapter
from .hf_encoder import HFEncoder
from ..integrity import FolderSnapshot, model_files, model_names
from ..model_args import model_arg

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
# LoRA-wrapped projections whose input (lora_A's columns) or output (lora_B's rows) is the
# model's hidden size in every Llama-family architecture (Mistral, Qwen, Gemma, MoE experts
# too); the other side may be an expert's own size, so it is not checked.
_IN_HIDDEN = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})
_OUT_HIDDEN = frozenset({"o_proj", "down_proj"})
_MAX_HEADER = 100 << 20  # bytes: a safetensors header claiming more is not read
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model", "spiece.model")


class AdapterError(ValueError):
    """An adapter that cannot be used as given: one line for ``evaldag: error:``."""


def adapter_config(folder: str | os.PathLike) -> dict:
    """``adapter_config.json`` of ``folder`` as a dict (an AdapterError naming the file otherwise)."""
    path = Path(folder).expanduser() / ADAPTER_CONFIG
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise AdapterError(f"{path}: cannot be read as JSON ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise AdapterError(f"{path}: not a JSON object")
    return data


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def resolve_base(folder: str | os.PathLike, adapter_base: str | None = None, flag: str = "--model") -> str:
    """The base checkpoint of the adapter in ``folder``: ``adapter_base`` (``--adapter-base``)
    when given, else its config's ``base_model_name_or_path`` (a local folder, or a hub id
    that must be in the local cache when offline)."""
    if adapter_base is not None:
        if not Path(adapter_base).expanduser().is_dir():
            raise AdapterError(f"{model_arg(flag, 'adapter_base', adapter_base)}: no such folder")
        return str(adapter_base)
    name = adapter_config(folder).get("base_model_name_or_path")
    if not isinstance(name, str) or not name.strip():
        raise AdapterError(f"{flag} {folder}: {ADAPTER_CONFIG} names no base_model_name_or_path; "
                           f"pass {model_arg(flag, 'adapter_base', 'DIR')} (the base checkpoint)")
    if Path(name).expanduser().is_dir():
        return name
    if not name.startswith((".", "/", "~")) and name.count("/") <= 1:  # a hub id: in the local cache?
        try:
            from huggingface_hub import try_to_load_from_cache

            if isinstance(try_to_load_from_cache(name, "config.json"), str):
                return name
        except Exception:  # noqa: BLE001 - a malformed id: refused below like a missing one
            pass
        if not _offline():
            return name  # downloaded at load time
    raise AdapterError(f"{flag} {folder}: the base model {name!r} (base_model_name_or_path in {ADAPTER_CONFIG}) is "
                       f"not a local folder{' nor in the Hugging Face cache (offline)' if _offline() else ''}; "
                       f"pass {model_arg(flag, 'adapter_base', 'DIR')} with a local copy of the base")


def has_tokenizer(folder: Path) -> bool:
    return any((folder / n).is_file() for n in _TOKENIZER_FILES)


def require_peft(what: str) -> None:
    """peft is an optional extra: one line saying how to install it. Looked up, not imported
    (importing peft imports torch, which a warm rerun must not pay for)."""
    if importlib.util.find_spec("peft") is None:
        raise AdapterError(f"{what} is a PEFT adapter ({ADAPTER_CONFIG}); loading it needs peft: "
                           "pip install 'evaldag[peft]'")


class HFPeftModel(HFModel):
    """A PEFT adapter folder plus its base checkpoint (``adapter_base``, else the config's
    ``base_model_name_or_path``); dtype, device and masking options apply to the base."""

    def __init__(self, path_or_id: Any, adapter_base: str | None = None, **kw: Any):
        super().__init__(path_or_id, **kw)
        if not self.is_dir:
            raise AdapterError(f"HFPeftModel: {self.path} is not a local adapter folder")
        self.base = HFModel(resolve_base(self.path, adapter_base), **kw)
        if isinstance(self.base, HFPeftModel):
            raise AdapterError(f"{self.path}: its base {self.base.path} is itself an adapter; merge it first")
        self.adapter_name = ""  # the name it gets inside the shared base (from the fingerprint)

    def resolved_dtype(self) -> str:
        return self.base.resolved_dtype()

    def _own_tokenizer(self) -> bool:
        return has_tokenizer(Path(self.path).expanduser())

    def mask_mode_matters(self) -> bool:
        if not self._own_tokenizer():
            return self.base.mask_mode_matters()
        return super().mask_mode_matters()

    def _compute_fingerprint(self) -> str:
        mask = [f"attention_mask={self.attention_mask}"] if self.mask_mode_matters() else []
        root = Path(self.path).expanduser()
        files = model_files(root)
        if not any(p.name in ADAPTER_WEIGHTS for p in files):
            raise FileNotFoundError(f"HFPeftModel: no adapter_model.safetensors or adapter_model.bin in {root}")
        self._snapshot = FolderSnapshot.take(root, files, file_sha256)
        own = [f"{n}={d}" for n, (_, d) in self._snapshot.files.items() if n != ADAPTER_CONFIG]
        # the config without the base's name: the base counts by its own fingerprint, so the
        # same adapter over a copy of its base elsewhere (--adapter-base) shares the cache
        conf = {k: v for k, v in adapter_config(root).items() if k != "base_model_name_or_path"}
        own.append(f"{ADAPTER_CONFIG}={_digest(json.dumps(conf, sort_keys=True, default=str))}")
        return _digest("hf-peft-1", f"base={self.base.fingerprint()}", *own, *mask)

    def weights_fingerprint(self) -> str | None:
        """None: an adapter's numbers depend on its base too; a fallback is proven by a probe."""
        return None

    def encoder(self) -> HFEncoder:
        if self._encoder is None:
            if not self._own_tokenizer():
                self._encoder = self.base.encoder()
            else:
                from transformers import AutoTokenizer

                tok = AutoTokenizer.from_pretrained(str(Path(self.path).expanduser()))
                _ensure_pad(tok)
                self._encoder = HFEncoder(tok)
        return self._encoder

    def chat_facts(self) -> Any:
        return folder_facts(Path(self.path).expanduser()) if self._own_tokenizer() else model_facts(self.base)

    def verify_unchanged(self) -> None:
        """The adapter's files and the base's (both fingerprinted) are still the ones hashed."""
        super().verify_unchanged()
        self.base.verify_unchanged()

    def describe(self) -> dict:
        """The adapter's folder and its base's own description (run.json's provenance)."""
        out = super().describe()
        out.update(source="adapter", adapter=out["path"], base=self.base.describe(),
                   peft_type=adapter_config(self.path).get("peft_type"))
        return out

    def load(self) -> HFAdapter:
        if self._adapter is not None:
            return self._adapter
        require_peft(self.path)
        fp = self.fingerprint()
        self.verify_unchanged()
        self.adapter_name = "a" + fp[:16]
        if self.base.is_dir:  # the CLI checked already; a library caller gets the same line
            check_shapes(self.path, Path(self.base.path).expanduser(), f"HFPeftModel {self.path}", self.base.path)
        model = _BASE.activate(self)
        self._snapshot.check_content(model_names(self._snapshot.root))  # what peft read is what was hashed
        _check_rows(self.path, model, self.encoder().tokenizer)
        self._adapter = _PeftHFAdapter(model, self.encoder().tokenizer, attention_mask=self.attention_mask,
                                       owner=self)
        return self._adapter


class _PeftHFAdapter(HFAdapter):
    """An HFAdapter over the shared base that makes its own adapter current before each batch
    (two adapters of one base may take turns in one run)."""

    def __init__(self, model: Any, tokenizer: Any, owner: HFPeftModel, **kw: Any):
        super().__init__(model, tokenizer, **kw)
        self.adapter_name, self.peft = owner.adapter_name, _BASE.peft  # its own base, even once another is kept

    def run_batch(self, requests: Any) -> list[Any]:
        _switch(self.peft, self.adapter_name)
        return super().run_batch(requests)


def _switch(peft: Any, name: str) -> None:
    """Make adapter ``name`` the current one (``set_adapter`` also marks it trainable: undone)."""
    if peft.active_adapter != name:
        peft.set_adapter(name)
        _grads_like_merged(peft)


def _grads_like_merged(peft: Any) -> None:
    """Gradients (per-sample gradient norms) as for the merged checkpoint: ``W + delta`` has the
    gradient of ``W``, so the base weights take them and the adapter's own parameters do not."""
    prefix = getattr(peft.base_model, "prefix", "lora_")
    for name, p in peft.get_base_model().named_parameters():
        p.requires_grad_(prefix not in name)


class _SharedBase:
    """The one base model this process keeps, with the adapters added to it."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.peft: Any = None
        self.loads = 0  # how many times a base was loaded (tests, the sweep's statistics)
        self.owners: dict[str, weakref.ref] = {}

    def _key(self, m: HFPeftModel) -> tuple:
        b = m.base
        return (b.fingerprint(), b.resolved_dtype(), b.device, b.attn_implementation, b.device_map, b.attention_mask)

    def activate(self, m: HFPeftModel) -> Any:
        """The base with ``m``'s adapter added and current: the transformers model to run."""
        with warnings.catch_warnings():  # peft calls a transformers method transformers deprecates: its
            warnings.filterwarnings("ignore", ".*is_gradient_checkpointing.*", FutureWarning)  # notice, not ours
            return self._activate(m)

    def _activate(self, m: HFPeftModel) -> Any:
        key = self._key(m)
        if key != self.key:
            self.release()
            base = m.base.load().model  # the base's own checks (its files, its vocabulary) run here
            from peft import PeftModel

            self.peft = PeftModel.from_pretrained(base, str(Path(m.path).expanduser()), adapter_name=m.adapter_name)
            self.key, self.loads = key, self.loads + 1
        else:
            for name, ref in list(self.owners.items()):  # adapters nobody holds any more
                if ref() is None and name != m.adapter_name:
                    if name in self.peft.peft_config:
                        self.peft.delete_adapter(name)
                    del self.owners[name]
            if m.adapter_name not in self.peft.peft_config:
                self.peft.load_adapter(str(Path(m.path).expanduser()), adapter_name=m.adapter_name)
        self.owners[m.adapter_name] = weakref.ref(m)
        self.use(m.adapter_name)
        self.peft.eval()
        _grads_like_merged(self.peft)
        return self.peft.get_base_model()  # adapter layers injected in place; the head split still works

    def use(self, name: str) -> None:
        _switch(self.peft, name)

    def release(self) -> None:
        """Free the base (before another base loads)."""
        if self.peft is None:
            return
        self.peft, self.key, self.owners = None, None, {}
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


_BASE = _SharedBase()
ADAPTER_CLASS.append(HFPeftModel)


def release_shared_base() -> None:
    """Free the kept base model (a sweep calls it when it moves past a base's adapters, so a
    plain checkpoint never shares the device with an unused base)."""
    _BASE.release()


def check_adapter(folder: str | os.PathLike, adapter_base: str | None, flag: str = "--model",
                  tokenizer: str | None = None) -> str:
    """Before anything loads (the CLI's checks): ``folder`` is an adapter, peft is installed,
    the base is found, the adapter fits a local base (:func:`check_shapes`); returns the base
    (a folder or a cached hub id)."""
    if not is_adapter_dir(folder):
        raise AdapterError(f"{model_arg(flag, 'adapter_base', adapter_base)}: {flag} {folder} is not an adapter folder "
                           f"(no {ADAPTER_CONFIG})")
    if tokenizer is not None:
        raise AdapterError(f"{flag} {folder}: an adapter takes its tokenizer from its own folder or its base's, "
                           f"not {model_arg(flag, 'tokenizer', tokenizer)}")
    require_peft(f"{flag} {folder}")
    base = resolve_base(folder, adapter_base, flag)
    if Path(base).expanduser().is_dir():  # the adapter's shapes against its base's hidden size
        check_shapes(folder, Path(base).expanduser(), f"{flag} {folder}", base)
    return base


def check_shapes(folder: str | os.PathLike, base_folder: Path, what: str, base: str) -> None:
    """Before anything loads: the adapter's LoRA matrices fit its base's ``hidden_size``
    (config.json). An adapter trained on another base otherwise fails inside peft, after the
    base loaded, with a page of size mismatches. Read from the safetensors header alone."""
    f = Path(folder).expanduser() / ADAPTER_WEIGHTS[0]
    hidden = _hidden_size(base_folder)
    if hidden is None or not f.is_file():
        return  # a .bin adapter or a config without hidden_size: peft's own check stands
    for name, shape in sorted(_tensor_shapes(f, what).items()):
        parts = name.split(".")
        if len(parts) < 3 or parts[-1] != "weight" or len(shape) != 2:
            continue
        lora, module = parts[-2], parts[-3]
        if lora == "lora_A" and module in _IN_HIDDEN:
            got, side = shape[1], "input"
        elif lora == "lora_B" and module in _OUT_HIDDEN:
            got, side = shape[0], "output"
        else:
            continue
        if got != hidden:
            raise AdapterError(f"{what}: {f.name} does not fit its base {base}: {name} has {got} {side} features, "
                               f"the base's hidden_size is {hidden} (config.json); the adapter was trained on "
                               "another base")


def _hidden_size(base_folder: Path) -> int | None:
    try:
        cfg = json.loads((base_folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    size = cfg.get("hidden_size", (cfg.get("text_config") or {}).get("hidden_size"))
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _tensor_shapes(f: Path, what: str) -> dict[str, list[int]]:
    """Tensor names and shapes from a safetensors header (an 8-byte length, then JSON)."""
    try:
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n)) if 0 < n <= _MAX_HEADER else None
    except (OSError, ValueError, RecursionError):
        header = None
    if not isinstance(header, dict):
        raise AdapterError(f"{what}: {f.name} is not a safetensors file (its header cannot be read)")
    return {k: v["shape"] for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict) and isinstance(v.get("shape"), list)}
