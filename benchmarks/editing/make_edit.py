"""Make an edited checkpoint for the demo and the tests: one MLP down-projection changed.

    python -m evaldag.benchmarks.editing.make_edit BASE_DIR OUT_DIR [--edits FILE] [--layer L]
                                                   [--method finetune|rome] [--corpus TEXTS]

Only layer L's MLP down-projection changes, so the weight-delta norms are non-zero on
layer L alone. ``finetune`` (default) trains it (Adam, ``STEPS`` full-batch steps) to make
each edit's ``target_new`` likely after its prompt (mean NLL over the target's tokens).
``rome`` makes ROME's rank-one closed form (``rome_edit.py``), one edit after another, with
the key covariance from ``--corpus``. ROME needs the fact to be read from that matrix at
the subject's last token: on the shipped trace model (assets/tracer, layer 2) it edits
every fact and leaves the neighbours alone; on the 2-layer demo model even an
unconstrained vector added there moved P(target_new) to at most 3e-4 (the model reads
the fact elsewhere), so the demo uses fine-tuning. Deterministic (seeded, one thread).
torch and transformers are imported inside functions.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from ...engine.adapters.hf.hf_encoder import HFEncoder
from ...engine.adapters.layer_names import layer_names
from .data import load_edits, load_texts
from .rome_edit import STEPS as ROME_STEPS
from .rome_edit import key_covariance, rome_update, target_nll

STEPS, LR = 30, 1e-2


def _down(model: Any, layer: int) -> Any:
    names = layer_names(model.config.model_type)
    return dict(model.named_modules())[names.module("mlp_down_proj", layer)]


def finetune_edits(model: Any, tok: Any, edits: list[dict], layer: int, steps: int = STEPS, lr: float = LR) -> list[float]:
    """Train layer ``layer``'s down-projection in place; returns P(target_new) per token after it, per edit."""
    import torch

    enc = HFEncoder(tok)
    for p in model.parameters():
        p.requires_grad_(False)
    weight = _down(model, layer).weight
    weight.requires_grad_(True)
    opt = torch.optim.Adam([weight], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        torch.stack([target_nll(model, enc, e["prompt"], e["target_new"]) for e in edits]).mean().backward()
        opt.step()
    weight.requires_grad_(False)
    with torch.no_grad():
        return [float((-target_nll(model, enc, e["prompt"], e["target_new"])).exp()) for e in edits]


def rome_edits(model: Any, tok: Any, edits: list[dict], layer: int, corpus: list[str], steps: int | None = None) -> list[float]:
    """ROME's rank-one update of layer ``layer``'s down-projection, edit after edit; P(target_new) per token after."""
    import torch

    enc, down = HFEncoder(tok), _down(model, layer)
    if not isinstance(down, torch.nn.Linear):
        raise ValueError(f"ROME here edits an nn.Linear down-projection; layer {layer}'s is {type(down).__name__}")
    cov = key_covariance(model, down, enc, corpus)
    for e in edits:
        rome_update(model, down, enc, e, cov, steps=steps or ROME_STEPS)
    with torch.no_grad():
        return [float((-target_nll(model, enc, e["prompt"], e["target_new"])).exp()) for e in edits]


def make_edited_checkpoint(base_dir: str | Path, out_dir: str | Path, edits: list[dict] | None = None,
                           layer: int = 1, steps: int | None = None, method: str = "finetune",
                           corpus: list[str] | None = None) -> list[float]:
    """Load ``base_dir``, apply the edits at ``layer``, save to ``out_dir`` (tokenizer files copied).

    ``steps`` defaults to the method's own (fine-tuning 30, ROME's value search 60).
    ``method="rome"`` makes ROME's rank-one update instead of fine-tuning and needs
    ``corpus`` (texts) for its key covariance: texts the metrics do not score."""
    if method not in ("finetune", "rome"):
        raise ValueError(f"unknown edit method {method!r}: expected 'finetune' or 'rome'")
    if method == "rome" and not corpus:
        raise ValueError("ROME needs a corpus (--corpus TEXTS) for its key covariance, e.g. the trace model's "
                         "corpus.json; keep it apart from the texts the metrics score")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    edits = load_edits() if edits is None else edits
    base, out = Path(base_dir), Path(out_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tok = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
        n = model.config.num_hidden_layers
        if not 0 <= layer < n:
            raise ValueError(f"layer {layer} is out of range: the model has {n} layers")
        if method == "rome":
            probs = rome_edits(model, tok, edits, layer, corpus, steps)
        else:
            probs = finetune_edits(model, tok, edits, layer, steps or STEPS)
        bad = [name for name, w in model.named_parameters() if not torch.isfinite(w).all()]
        if bad:
            raise ValueError(f"the edit left non-finite weights in {', '.join(bad)}; nothing was written to {out}")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for f in base.iterdir():
        if f.is_file() and (f.name.startswith(("tokenizer", "special_tokens")) or f.name in ("vocab.json", "merges.txt")):
            shutil.copy2(f, out / f.name)
    return probs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaldag.benchmarks.editing.make_edit", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("base_dir")
    p.add_argument("out_dir")
    p.add_argument("--edits", default=None, help="edit file (default: the shipped set)")
    p.add_argument("--layer", type=int, default=1)
    p.add_argument("--steps", type=int, default=None, help="optimisation steps (default: fine-tuning 30, ROME 60)")
    p.add_argument("--method", choices=["finetune", "rome"], default="finetune",
                   help="fine-tune the down-projection, or ROME's rank-one closed form")
    p.add_argument("--corpus", default=None, help="ROME (required): texts for the key covariance, apart from the scored ones")
    args = p.parse_args(argv)
    try:
        corpus = [t["text"] for t in load_texts(args.corpus)] if args.corpus else None
        probs = make_edited_checkpoint(args.base_dir, args.out_dir, load_edits(args.edits), args.layer, args.steps,
                                       args.method, corpus)
    except (ValueError, OSError) as exc:  # bad input: one line, as the evaldag CLI does
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    print(f"edited {len(probs)} facts at layer {args.layer} ({args.method}); P(target_new) per token after the edit: "
          + ", ".join(f"{x:.3f}" for x in probs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
