"""Model transforms: a model made from another (quantized, fine-tuned), evaluated as a model of its own.

A :class:`Transform` has a ``name``, a code ``version``, typed parameters (a pydantic
``Params`` model) and says whether it ``trains``. It turns its parent's loaded weights
into the derived model's (:meth:`Transform.apply`). The derived model is a model resource
of its own: its fingerprint is the parent's fingerprint + the transform's name, version and
parameters (+ the fingerprint of the data it trains on), so every metric of every benchmark
runs on it through the same executor, cache and report as on a checkpoint, and nothing of
the parent's cache is ever served for it.

On the command line a transform is a *model attack* (``evaldag run tofu --attack
quantize:nf4,blocksize=64``): the spec is the name, then ``:`` and comma-separated
parameters, ``key=value`` or one bare value for the transform's ``positional`` parameter.
"Model attack" is kept apart from the membership-inference attacks (MIA), which score a
model and do not change it.

Who can be transformed: a model resource that can hand over its weights defines
``derive(transform, role)`` (the ``hf:`` backend: checkpoints, adapters, in-memory models;
``adapters/hf_derived.py``). Any other backend (``openai:``, ``vllm:``, ``replay:``,
``toy:``) is refused by :func:`derive` before any work, naming it.

Transforms are found by name: the built-in ones (:data:`BUILTIN`), then the
``evaldag.transforms`` entry-point group, where a plugin adds its own
(docs/model-attacks.md). Other quantizers (GPTQ, AWQ, GGUF types) are further transforms
of this shape: a name, parameters, a deterministic ``apply``.
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, ClassVar

import pydantic

from .menu import did_you_mean

TRANSFORM_GROUP = "evaldag.transforms"
#: name -> "module:Class" of the transforms evaldag ships (found without an installed entry point)
BUILTIN = {"quantize": "evaldag.engine.quantize:Quantize", "relearn": "evaldag.engine.relearn_transform:Relearn"}
_REGISTERED: dict[str, type["Transform"]] = {}


class TransformError(ValueError):
    """A model attack that cannot be used as given: one line for ``evaldag: error:``."""


class Transform:
    """Subclass this; register the subclass under the ``evaldag.transforms`` entry-point group.

    ``Params``: a pydantic model of the parameters, each with a default (a bare
    ``name`` is a valid spec) and all of them in the derived fingerprint. ``positional``: the
    parameter a bare value sets (``quantize:nf4`` sets ``method``). ``trains``: whether
    ``apply`` learns from data; then :meth:`data_fingerprint` must name that data and it
    joins the fingerprint. ``roles``: the model resources of a run it derives (the retain
    model too, for a transform whose control must see the same change).
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    Params: ClassVar[type[pydantic.BaseModel]] = pydantic.BaseModel
    positional: ClassVar[str | None] = None
    trains: ClassVar[bool] = False
    roles: ClassVar[tuple[str, ...]] = ("model",)

    def __init__(self, params: pydantic.BaseModel | None = None, text: str | None = None):
        self.params = params if params is not None else self.Params()
        self.text = text or self.spec()

    # -- identity
    def spec(self) -> str:
        """The canonical spelling: every parameter, sorted, defaults included."""
        fields = self.params.model_dump(mode="json")
        return self.name + (":" + ",".join(f"{k}={_word(v)}" for k, v in sorted(fields.items())) if fields else "")

    def folder(self) -> str:
        """A folder name for this model attack's outputs (``OUT/attacks/<folder>/``): the spec as
        the user wrote it, every character other than letters, digits, ``.``, ``-``, ``_``,
        ``=`` and ``,`` made ``_``."""
        return re.sub(r"[^A-Za-z0-9._=,-]", "_", self.text.replace(":", "_")).strip("._") or self.name

    def identity(self) -> dict:
        """What the derived fingerprint holds (and run.json records): name, version, parameters, data."""
        return {"name": self.name, "version": self.version, "params": self.params.model_dump(mode="json"),
                "data": self.data_fingerprint() if self.trains else None}

    def derived_fingerprint(self, parent: str) -> str:
        """The derived model's fingerprint from its parent's."""
        return hashlib.sha256(json.dumps({"derived": 1, "parent": parent, **self.identity()},
                                         sort_keys=True).encode()).hexdigest()

    def data_fingerprint(self) -> str | None:
        """The fingerprint of the data ``apply`` trains on (required when ``trains``)."""
        if self.trains:
            raise NotImplementedError(f"{type(self).__name__} trains: it must say which data (data_fingerprint)")
        return None

    # -- use
    def check(self) -> None:
        """Before any work: what ``apply`` needs is there (a package, a data split); a
        :class:`TransformError` line otherwise."""

    def bind(self, resources: dict[str, Any], role: str) -> "Transform":
        """This transform for one run whose (lazy) resources are ``resources``, deriving ``role``;
        a transform that trains takes its data from there. Default: itself."""
        return self

    def scored(self, resources: dict[str, Any]) -> dict[str, Any]:
        """The run's resources as the derived models' run scores them, once they are derived. Default:
        unchanged; a transform that trains on part of a split scores the rest (relearn's disjoint variant)."""
        return resources

    def capabilities(self, caps: Any) -> Any:
        """What the derived model serves, from its parent's ``Capabilities`` (default: the same)."""
        return caps

    def apply(self, model: Any, tokenizer: Any) -> Any:
        """The derived model from ``model`` (a freshly loaded torch model of the parent, this
        transform's own: change it in place and return it, or return another)."""
        raise NotImplementedError


def _word(v: Any) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


# ------------------------------------------------------------------------------ registry

def register(cls: type[Transform]) -> type[Transform]:
    """Make ``cls`` known by its name (a plugin may also use the entry-point group)."""
    _REGISTERED[cls.name] = cls
    return cls


def names() -> list[str]:
    return sorted(set(_REGISTERED) | set(BUILTIN) | {ep.name for ep in entry_points(group=TRANSFORM_GROUP)})


def get(name: str, flag: str = "--attack", text: str | None = None) -> type[Transform]:
    """The transform class named ``name``; an unknown one is one line (naming ``text``, the
    spec as written) with the close match."""
    if name not in _REGISTERED:
        eps = {ep.name: ep for ep in entry_points(group=TRANSFORM_GROUP)}
        if name in eps:
            _REGISTERED[name] = eps[name].load()
        elif name in BUILTIN:
            module, attr = BUILTIN[name].split(":")
            _REGISTERED[name] = getattr(import_module(module), attr)
        else:
            known = names()
            raise TransformError(f"{flag} {text or name}: unknown model attack {name!r}; {did_you_mean(name, known)}"
                                 f"known: {', '.join(known)} (the membership-inference attacks are metrics: --metrics mia)")
    return _REGISTERED[name]


def parse(text: str, flag: str = "--attack") -> Transform:
    """``name[:value|key=value,...]`` -> a transform with its parameters checked, or one line:
    an unknown name or parameter with its close match, a value of the wrong type naming it."""
    text = str(text).strip()
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise TransformError(f"{flag} {text!r}: no model attack named; give NAME[:KEY=VALUE,...] (known: {', '.join(names())})")
    cls = get(name, flag, text)
    fields = cls.Params.model_fields
    given: dict[str, str] = {}
    for item in filter(None, (w.strip() for w in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:  # a bare value: the positional parameter
            if cls.positional is None:
                raise TransformError(f"{flag} {text}: {name} takes KEY=VALUE parameters, not a bare {item!r} "
                                     f"(its parameters: {', '.join(fields) or 'none'})")
            key, value = cls.positional, item
        if key not in fields:
            raise TransformError(f"{flag} {text}: {name} has no parameter {key!r}; {did_you_mean(key, fields)}"
                                 f"its parameters: {', '.join(fields) or 'none'}")
        if key in given:
            raise TransformError(f"{flag} {text}: {name}'s parameter {key} is given twice")
        given[key] = value.strip()
    try:
        params = cls.Params(**given)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        where, msg = ".".join(map(str, err["loc"])), str(err["msg"]).removeprefix("Value error, ")
        what = f"{name}'s {where}={given.get(where, '')}" if where else name
        raise TransformError(f"{flag} {text}: {what}: {msg}") from None
    return cls(params, text)


# ------------------------------------------------------------------------------ derived models

def derive(parent: Any, transform: Transform, role: str = "model", flag: str = "--attack") -> Any:
    """The model ``transform`` makes from ``parent`` (a lazy model resource: nothing loads
    here), or one line naming the backend that cannot hand over its weights."""
    make = getattr(parent, "derive", None)
    if make is None:
        label = parent.label() if hasattr(parent, "label") else type(parent).__name__
        backend = getattr(parent, "backend", type(parent).__name__)
        raise TransformError(f"{flag} {transform.text}: the {role.replace('_', ' ')} {label} is served by the "
                             f"{backend} backend, which cannot hand over its weights; a model attack needs a local "
                             "hf: checkpoint (a folder, a hub id, a PEFT adapter)")
    return make(transform, role)


def derive_resources(resources: dict[str, Any], transform: Transform, flag: str = "--attack") -> dict[str, Any]:
    """A run's resources with each of ``transform.roles`` present replaced by its derived model."""
    out = dict(resources)
    if not any(out.get(role) is not None for role in transform.roles):
        raise TransformError(f"{flag} {transform.text}: this run has no {' or '.join(transform.roles)} to attack")
    bound = None
    for role in transform.roles:
        if out.get(role) is not None:
            bound = transform.bind(resources, role)
            out[role] = derive(out[role], bound, role, flag)
    return bound.scored(out) if bound is not None else out
