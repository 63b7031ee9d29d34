"""The classifier side of TOFU and MUSE: ``--classifier-model`` and the gibberish metrics' gate.

open-unlearning's ``forget_Q_A_gibberish`` / ``forget_gibberish`` need a second model, a
sequence classifier (``classifier_model_args``; by default a hub model), and its configs
leave them out of the defaults. So here: the flags, the config fields, the checks of the
classifier folder before any model loads (one line each), and the rule that ``--metrics
all`` includes the two only when a classifier is given, while naming one without a
classifier is an error before any work.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

from ...engine.adapters.model_args import DeprecatedFlag
from ...engine.argtypes import positive_int
from ...engine.option_owners import add_shared
from .. import common
from .serves import servable

#: the metrics that read ``classifier_model``, in every unlearning benchmark
CLASSIFIER_METRICS = frozenset({"forget_Q_A_gibberish", "forget_gibberish"})
NEEDS = ("{name} needs a sequence classifier: give --classifier-model DIR|ID "
         "(open-unlearning's default is madhurjindal/autonlp-Gibberish-Detector-492513457)")


def _class_id(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a class index >= 0, not {text}")
    return value


def add_classifier_arguments(p: argparse.ArgumentParser) -> None:
    """TOFU's and MUSE's shared declarations (``engine/option_owners.py``)."""
    add_shared(p, "--classifier-model", default=None,
               help="forget_Q_A_gibberish / forget_gibberish: a sequence classifier (DIR or hub id), "
                    "open-unlearning's classifier_model_args")
    # its settings are --model-arg classifier:max_length=N (default: TOFU 32, MUSE 512), classifier:class_id=K
    add_shared(p, "--classifier-max-length", type=positive_int, default=None, action=DeprecatedFlag,
               instead="--model-arg classifier:max_length=N")
    add_shared(p, "--classifier-class-id", type=_class_id, default=0, action=DeprecatedFlag,
               instead="--model-arg classifier:class_id=K")


#: ``--model-arg classifier:KEY=VALUE``: the classifier's settings and how each is read
SETTINGS = {"max_length": positive_int, "class_id": _class_id}


def classifier_options(args: argparse.Namespace) -> dict[str, Any]:
    given = common.backend_options(args).get("classifier_model", {})
    out = dict(classifier_model=getattr(args, "classifier_model", None),
               classifier_max_length=getattr(args, "classifier_max_length", None),
               classifier_class_id=getattr(args, "classifier_class_id", 0) or 0)
    for key, value in given.items():
        if key not in SETTINGS:
            raise ValueError(f"--model-arg classifier:{key}={value}: the classifier takes no setting {key!r} "
                             f"(it takes: {', '.join(SETTINGS)})")
        try:
            out[f"classifier_{key}"] = SETTINGS[key](value)
        except (ValueError, argparse.ArgumentTypeError) as e:
            raise ValueError(f"--model-arg classifier:{key}={value}: {e}") from None
    return out


def gated(names: tuple[str, ...], words: Any, have_classifier: bool) -> tuple[str, ...]:
    """``names`` without the classifier metrics that only a menu word (``all``) brought in,
    when there is no classifier; a classifier metric named outright stays (and is refused)."""
    if have_classifier:
        return tuple(names)
    given = {w.strip() for w in (words.split(",") if isinstance(words, str) else words or ())}
    return tuple(n for n in names if n not in CLASSIFIER_METRICS or n in given)


class ClassifierOptions(BaseModel):
    """The classifier of the gibberish metrics; ``menu`` names the benchmark whose words ``metrics`` takes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    menu: ClassVar[str] = ""

    classifier_model: str | None = None
    classifier_max_length: int | None = None  # None: the benchmark's own (TOFU 32, MUSE 512)
    classifier_class_id: int = 0

    @model_validator(mode="before")
    @classmethod
    def _all_is_what_the_run_serves(cls, data: Any) -> Any:
        """``metrics="all"`` as the CLI reads it (``serves.py``): without a classifier, a reference or
        retain model, the metrics that need one are left out (the CLI says which in a note)."""
        if isinstance(data, dict) and cls.menu:
            words = data.get("metrics")
            if isinstance(words, str):
                words = (words,)
            if isinstance(words, (tuple, list)) and words and all(isinstance(w, str) for w in words):
                text = ",".join(words)
                names, _ = servable(common.menu_metrics(cls.menu, tuple(words)), text, data)
                data = {**data, "metrics": gated(names, text, bool(data.get("classifier_model")))}
        return data

    @model_validator(mode="after")
    def _named_without_classifier(self) -> "ClassifierOptions":
        wanted = [m for m in getattr(self, "metrics", ()) if m in CLASSIFIER_METRICS]
        if wanted and not self.classifier_model:
            raise ValueError(NEEDS.format(name=wanted[0]))
        return self


def _pad_token(folder: Path) -> str | None:
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        pad = data.get("pad_token") if isinstance(data, dict) else None
        pad = pad.get("content") if isinstance(pad, dict) else pad
        if isinstance(pad, str) and pad:
            return pad
    return None


def check_classifier(path: str, class_id: int) -> None:
    """Before any model loads: a sequence classifier's folder, ``class_id`` among its labels, a
    tokenizer with a pad token (open-unlearning pads each batch). A hub id not in the local
    cache is checked when it loads."""
    flag = "--classifier-model"
    folder = common.checkpoint_folder(path, flag)
    if folder is None:
        return
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        raise ValueError(f"{flag} {path}: no readable config.json there, so not a model checkpoint folder") from None
    archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ValueError(f"{flag} {path}: config.json's architectures are {', '.join(archs) or 'not given'}, not a "
                         "sequence classifier (…ForSequenceClassification, what AutoModelForSequenceClassification loads)")
    labels = cfg.get("id2label")
    n = len(labels) if isinstance(labels, dict) and labels else int(cfg.get("num_labels", 2))
    if not 0 <= class_id < n:
        names = ", ".join(f"{k}: {v}" for k, v in sorted((labels or {}).items(), key=lambda kv: int(kv[0])))
        raise ValueError(f"--model-arg classifier:class_id={class_id}: {flag} {path} has {n} labels"
                         + (f" ({names})" if names else f" (0..{n - 1})"))
    if not common.has_tokenizer(folder):
        raise ValueError(f"{flag} {path}: no tokenizer in {path}")
    if _pad_token(folder) is None:
        raise ValueError(f"{flag} {path}: its tokenizer has no pad token, and the classifier pads each batch of "
                         "generations to the longest (set pad_token in tokenizer_config.json)")


def classifier_resource(cfg: Any) -> Any:
    """The ``classifier_model`` resource (checked first), or None when no metric reads it."""
    if not cfg.classifier_model or not CLASSIFIER_METRICS & set(cfg.metrics):
        return None
    from ...metrics.unlearning.classifier_backend import HFClassifier

    check_classifier(cfg.classifier_model, cfg.classifier_class_id)
    common.check_device(cfg.device)
    return HFClassifier(cfg.classifier_model, device=cfg.device)
