"""The editing benchmark's graph: which node each EDITING_EVAL.json entry is, and its checks.

Every metric reads ``model`` (the edited checkpoint), ``base_model`` (the original) or
both; ``*_base`` entries are the same node bound to ``base_model``, so "before" and
"after" share code, requests and cache. :func:`preflight` runs every check that needs no
forward pass (architectures and shapes, edits, layer indices) before anything is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ...engine import Node, Rows
from ...engine.adapters import spec as specs
from ...engine.adapters.hf_weights import check_model_dirs
from ...engine.adapters.layer_names import num_layers, read_config
from ...metrics.editing.causal_trace import causal_trace
from ...metrics.editing.efficacy import efficacy, efficacy_dataset
from ...metrics.editing.perplexity import perplexity, perplexity_change
from ...metrics.editing.prompts import check_edit
from ...metrics.editing.rome_diagnostics import rome_denominator, rome_key_ood
from ...metrics.editing.quantization import check_quantize_extra, nf4_changed_fraction
from ...metrics.editing.weight_delta_norm import weight_delta_norm
from .. import common
from .config import ALL_METRICS, EditingConfig
from .data import load_edits, load_texts
from .rome_checks import check_rome_layers, rome_layers

GROUP = "EDITING"
BASE = {"model": "base_model"}
READS_WEIGHTS = ("weight_delta_norm", "nf4_changed_fraction")  # through the weight_deltas provider: both checkpoints' safetensors files
MAX_CONTEXT = 1024


def local(path: str | None, flag: str = "--model") -> str | None:
    """The checkpoint folder or hub id an ``hf`` spec names (``hf:DIR`` or a bare path);
    None for another backend (``openai:URL``), whose weights are not here to read."""
    if not path:
        return None
    parsed = specs.parse(path, flag)
    return parsed.target if parsed.scheme == "hf" else None


def _config(path: str | None) -> dict | None:
    path = local(path)
    return read_config(path) if path and Path(path).expanduser().is_dir() else None


def window(cfg: EditingConfig) -> tuple[int, int]:
    """(max_length, stride): the config's, else the base model's context (<= 1,024) and half of it."""
    max_length = cfg.max_length
    if max_length is None:
        mc = _config(cfg.base_model) or {}
        max_length = min(int(mc.get("max_position_embeddings") or mc.get("n_positions") or MAX_CONTEXT), MAX_CONTEXT)
    return max_length, cfg.stride or max(1, max_length // 2)


def recipes(cfg: EditingConfig) -> dict[str, Callable[[], Node]]:
    max_length, stride = window(cfg)
    ppl = {"max_length": max_length, "stride": stride, "per_text": cfg.ppl_per_text}
    trace = {"samples": cfg.trace_samples, "noise": cfg.trace_noise, "noise_factor": cfg.trace_noise_factor,
             "seed": cfg.trace_seed, "edits": cfg.trace_edits, "occurrence": cfg.trace_occurrence, "answer": cfg.trace_answer}
    return {
        "weight_delta_norm": lambda: weight_delta_norm(ord=cfg.norm, layers=cfg.layers),
        "nf4_changed_fraction": lambda: nf4_changed_fraction(layers=cfg.layers),
        "perplexity": lambda: perplexity(**ppl),
        "perplexity_base": lambda: perplexity(bind=BASE, **ppl),
        "perplexity_change": lambda: perplexity_change(**ppl),
        "efficacy": lambda: efficacy(prompts="rewrite"),
        "efficacy_base": lambda: efficacy(prompts="rewrite", bind=BASE),
        "generalization": lambda: efficacy(prompts="paraphrase"),
        "generalization_base": lambda: efficacy(prompts="paraphrase", bind=BASE),
        "specificity": lambda: efficacy(prompts="neighborhood"),
        "specificity_base": lambda: efficacy(prompts="neighborhood", bind=BASE),
        "efficacy_dataset": lambda: efficacy_dataset(),
        "causal_trace": lambda: causal_trace(restore="hidden", **trace),
        "causal_trace_mlp": lambda: causal_trace(restore="mlp", window=cfg.trace_window, **trace),
        "causal_trace_attn": lambda: causal_trace(restore="attn", window=cfg.trace_window, **trace),
        "rome_denominator": lambda: rome_denominator(**rome(cfg)),
        "rome_key_ood": lambda: rome_key_ood(**rome(cfg)),
    }


def rome(cfg: EditingConfig) -> dict:
    """The ROME diagnostics' params: layers, ridge, templates (the covariance node is shared)."""
    return {"layers": rome_layers(cfg), "ridge": cfg.cov_ridge, "templates": cfg.context_templates}


def nodes(cfg: EditingConfig) -> list[Node]:
    unknown = [m for m in cfg.metrics if m not in ALL_METRICS]
    if unknown:
        raise ValueError(f"unknown EDITING metric(s) {unknown}; known: {', '.join(ALL_METRICS)}")
    made = recipes(cfg)
    return [made[m]().named(m, GROUP) for m in cfg.metrics]


def preflight(cfg: EditingConfig, edits: list[dict]) -> None:
    """Every check that needs no forward pass; a ValueError names what is wrong.

    The two checkpoints exist (folders, or hub ids in the local cache) and the device
    does (benchmarks/common.check_model); two local folders are the same architecture
    with the same tensor shapes (config fields and safetensors headers only); every edit
    has its fields and its subject in its prompt; layer and trace-edit indices are in range.
    """
    if not cfg.model or not cfg.base_model:
        raise ValueError("editing needs --model EDITED_DIR and --base-model ORIGINAL_DIR")
    reading = [m for m in cfg.metrics if m in READS_WEIGHTS]
    if "nf4_changed_fraction" in cfg.metrics:
        check_quantize_extra()
    for flag, path in (("--model", cfg.model), ("--base-model", cfg.base_model)):
        if reading and local(path, flag) is None:  # the planner sees request kinds; weights are read from files
            raise ValueError(f"{', '.join(reading)} {'reads' if len(reading) == 1 else 'read'} both checkpoints' weights, "
                             f"and {flag} {path} is a server model whose weights are not here: give its checkpoint "
                             f"folder (hf:DIR) or leave {', '.join(reading)} out (--metrics)")
    opts = common.ModelOptions(dtype=cfg.dtype, device=cfg.device)
    folders = {}
    for flag, path in (("--model", cfg.model), ("--base-model", cfg.base_model)):
        path = local(path, flag)  # another backend's model is checked by its resource (and the planner)
        if path is None:
            folders[flag] = None
            continue
        common.check_model(path, opts, flag, cfg.backend_options.get("tokenizer"))
        folders[flag] = common.checkpoint_folder(path, flag)
    if folders["--model"] is not None and folders["--base-model"] is not None:
        check_model_dirs(folders["--base-model"], folders["--model"])
    for i, row in enumerate(edits):
        check_edit(row, i)
    if folders["--base-model"] is not None:
        n = num_layers(read_config(folders["--base-model"]))
        bad = [x for x in cfg.layers or () if not 0 <= x < n]
        if bad:
            raise ValueError(f"layer {bad[0]} is out of range: the base model has {n} layers (0..{n - 1})")
    if any(m in cfg.metrics for m in ("rome_denominator", "rome_key_ood")):
        check_rome_layers(cfg, [r["text"] for r in load_texts(cfg.corpus)] if cfg.corpus and Path(cfg.corpus).is_file() else None)
    bad_edits = [i for i in cfg.trace_edits or () if not 0 <= i < len(edits)]
    if bad_edits:
        raise ValueError(f"trace edit index {bad_edits[0]} is out of range: there are {len(edits)} edits")


def resources(cfg: EditingConfig) -> dict[str, Any]:
    """The two models (lazy) and the edits and texts (read and checked now: they are small)."""
    edits = load_edits(cfg.edits)
    preflight(cfg, edits)
    texts = load_texts(cfg.texts)
    tok = {"tokenizer": cfg.backend_options["tokenizer"]} if cfg.backend_options.get("tokenizer") else {}
    given = {"model": (cfg.model, "--model", cfg.backend_options), "base_model": (cfg.base_model, "--base-model", tok)}
    models = {}
    for role, (path, flag, quals) in given.items():  # a folder, hf:DIR|ID, or another backend's spec
        opts = common.ModelOptions(dtype=cfg.dtype, device=cfg.device, attention_mask="padding",
                                   backend_options={"model": quals} if quals else {})
        models[role] = common.hf_model(path, opts, flag)
    out = {**models, "edits": Rows(lambda: edits, cfg.edits or "shipped:edits.json"),
           "texts": Rows(lambda: texts, cfg.texts or "shipped:texts.json")}
    if cfg.corpus:  # ROME's key covariance: texts no metric scores
        corpus = load_texts(cfg.corpus)
        out["corpus"] = Rows(lambda: corpus, cfg.corpus)
    return out
