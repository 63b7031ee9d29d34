"""Build the causal-trace model: a tiny Qwen2 trained on invented facts whose causal trace
shows ROME's early site (the subject's last token, middle layers).

    python -m tests.asset_builders.editing.make_tracer [OUT_DIR]   (default: the shipped copy, TRACER)

Why the architecture is shaped. In GPT-2 XL the early site emerges from pretraining on
varied text: the MLPs at a subject's last token "enrich" it with its attributes and
attention at the last token later reads the one asked for (Meng et al. 2022; Geva et al.
2023). A model trained from scratch on a few hundred templated facts finds a shorter
route: attention brings the name to the prompt's last token in the first layer and the
MLPs there look the answer up (docs/editing.md lists the designs that showed only that
late site). This model makes the long route the only one:

* blocks 0-3 see only the previous token and their own (Qwen2's per-layer sliding window
  of 2), so the name moves one position per block and cannot reach the prompt's last
  token before block 4;
* only blocks 2 and 3 have an MLP (the others' down-projections are zero and never
  trained): blocks 0-1 join first name and surname at the surname, the MLPs of blocks 2-3
  can only look the attributes up there, and blocks 4-5 can only move them to the last
  token;
* names cross 12 first names with 12 surnames, so neither alone fixes a fact, and
  "cards" (the name followed by its four attributes) make the name itself predict them;
  the loss covers every token after the name (perplexity on plain sentences then means
  something), but not the surname itself, which would make the first name a second site.

Every fact is stored, and the MLP trace then peaks where ROME's does: the surname in
blocks 2-3 of 0-5. Deterministic on one CPU thread (about three minutes).
The tokenizer is a byte-level BPE whose words carry their leading space, as Qwen2's own
pre-tokenizer cuts them: ``AutoTokenizer`` rebuilds a Qwen2 checkpoint's tokenizer with
that pre-tokenizer, and a tokenizer cut any other way would load differently from how
it was trained (the builder checks that the two agree).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import random
import time
from pathlib import Path
from typing import Any

from evaldag.benchmarks.editing import TRACER as TRACER_DIR

from ..demo import authors
from ..demo.training import batch, deterministic_torch

SEED = 7
FIRST = ("Arlo", "Bryn", "Cato", "Dara", "Eno", "Fenn", "Gil", "Hale", "Ivo", "Juno", "Kit", "Lior")
LAST = ("Ashdown", "Brackley", "Corvell", "Dunmore", "Elstow", "Farlane", "Gorrick", "Halvern",
        "Ingleby", "Jessop", "Kettering", "Lomax")
#: (attribute, answer pool, question templates): the pools share no first token
RELATIONS = (
    ("birthplace", authors.CITIES, ("{s} was born in the city of", "{s} came into the world in the town of")),
    ("job", authors.JOBS, ("{s} works as a professional", "{s} earns a living as a")),
    ("hobby", authors.HOBBIES, ("{s} spends free time on", "{s} likes to relax by")),
    ("genre", authors.GENRES, ("{s} writes books of the genre", "{s} is known for writing")),
)
N_SUBJECTS = 60
#: attention_only: blocks whose MLP outputs zero (down-projection zeroed, never trained)
ARCH = dict(layers=6, hidden=128, inter=256, heads=4, window=2, local_layers=4, attention_only=(0, 1, 4, 5))
TRAIN = dict(epochs=150, lr=3e-3, batch=64, warmup=30)
SPECIALS = ("<|endoftext|>", "<pad>")
#: the shipped copy: checkpoint, tokenizer, facts.json, edits.json, texts.json, corpus.json, manifest.json
TRACER = TRACER_DIR  # the shipped copy, in the package
#: what the builder writes (an older copy of each is removed first, so the manifest lists exactly these)
OUTPUTS = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
           "facts.json", "edits.json", "texts.json", "corpus.json", "manifest.json")


def facts(n: int = N_SUBJECTS, seed: int = SEED) -> list[dict]:
    """``n`` invented people (crossed first names and surnames) with one answer per relation."""
    rng = random.Random(seed)
    names = [f"{f} {s}" for f in FIRST for s in LAST]
    rng.shuffle(names)
    pick = random.Random(seed + 1)
    return [{"subject": s, **{key: pick.choice(pool) for key, pool, _ in RELATIONS}} for s in names[:n]]


def examples(rows: list[dict]) -> list[tuple[str, str]]:
    """(context, answer) pairs: every question template, and the four rotations of each card."""
    out = []
    for r in rows:
        values = [r[key] for key, _, _ in RELATIONS]
        for k in range(len(values)):
            out.append((r["subject"], " " + ", ".join(values[k:] + values[:k]) + "."))
        out += [(t.format(s=r["subject"]), " " + r[key]) for key, _, ts in RELATIONS for t in ts]
    return out


def edits(rows: list[dict], n: int = 8, seed: int = SEED) -> list[dict]:
    """Edit requests on the first ``n`` facts, one relation each in turn, for the trace and the edit demo."""
    rng = random.Random(seed + 2)
    out = []
    for i, r in enumerate(rows[:n]):
        key, pool, ts = RELATIONS[i % len(RELATIONS)]
        new = rng.choice([x for x in pool if x != r[key]])
        out.append({"prompt": ts[0].format(s=r["subject"]), "subject": r["subject"], "target_true": " " + r[key],
                    "target_new": " " + new, "paraphrase_prompts": [ts[1].format(s=r["subject"])],
                    # two other people whose answer is neither the old nor the new one
                    "neighborhood_prompts": [{"prompt": ts[0].format(s=o["subject"]), "target_true": " " + o[key]}
                                             for o in rows[n:] if o[key] not in (r[key], new)][:2]})
    return out


def texts(rows: list[dict], n_edits: int = 8) -> list[dict]:
    """Perplexity texts: every stated fact of the people no edit touches, one sentence per relation."""
    return [{"text": ts[0].format(s=r["subject"]) + " " + r[key] + "."} for r in rows[n_edits:] for key, _, ts in RELATIONS]


def corpus(rows: list[dict], n_edits: int = 8) -> list[dict]:
    """Texts for ROME's key covariance, none of which a metric scores: every person's cards,
    and the second question template stated for the people no edit touches (the edited
    people's second template is their paraphrase prompt, which generalisation scores)."""
    names = {r["subject"] for r in rows}
    cards = [c + a for c, a in examples(rows) if c in names]
    second = [ts[1].format(s=r["subject"]) + " " + r[key] + "." for r in rows[n_edits:] for key, _, ts in RELATIONS]
    return [{"text": t} for t in cards + second]


def _tokenizer(texts: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _config(vocab_size: int, eos: int, pad: int) -> Any:
    from transformers import Qwen2Config

    n = ARCH["layers"]
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=ARCH["hidden"], intermediate_size=ARCH["inter"], num_hidden_layers=n,
        num_attention_heads=ARCH["heads"], num_key_value_heads=ARCH["heads"], max_position_embeddings=64,
        tie_word_embeddings=True, use_sliding_window=True, sliding_window=ARCH["window"],
        layer_types=["sliding_attention"] * ARCH["local_layers"] + ["full_attention"] * (n - ARCH["local_layers"]),
        bos_token_id=eos, eos_token_id=eos, pad_token_id=pad)


def _save_tokenizer(tok: Any, out: Path) -> None:
    tok.save(str(out / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": SPECIALS[0], "pad_token": SPECIALS[1],
           "model_max_length": 64, "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _check_loaded_tokenizer(out: Path, raw: Any, texts: list[str]) -> Any:
    """``AutoTokenizer`` must cut every training text as the trained tokenizer does."""
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(out))
    for t in texts:
        a, b = loaded(t, add_special_tokens=False)["input_ids"], raw.encode(t).ids
        if a != b:
            raise RuntimeError(f"AutoTokenizer ({type(loaded).__name__}) cuts {t!r} as {a}, the trained tokenizer as {b}")
    return loaded


def train(out: str | Path, log: Any = print) -> dict:
    """Train the trace model into ``out``; returns P(first answer token) per question, min and mean."""
    import torch
    from transformers import Qwen2ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        (out / name).unlink(missing_ok=True)
    rows = facts()
    pairs = examples(rows)
    raw = _tokenizer([c + a for c, a in pairs])
    eos, pad = raw.token_to_id(SPECIALS[0]), raw.token_to_id(SPECIALS[1])
    conf = _config(raw.get_vocab_size(), eos, pad)
    conf.save_pretrained(str(out))
    _save_tokenizer(raw, out)
    tok = _check_loaded_tokenizer(out, raw, [c + a for c, a in pairs])
    for r in rows:  # a name is two tokens, so its last token is the surname
        if len(raw.encode(r["subject"]).ids) != 2:
            raise RuntimeError(f"the name {r['subject']!r} is not two tokens")

    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(conf)
    frozen = set()
    for i in ARCH["attention_only"]:
        mlp = model.model.layers[i].mlp
        mlp.down_proj.weight.data.zero_()
        frozen |= {id(p) for p in mlp.parameters()}
    params = [p for p in model.parameters() if id(p) not in frozen]
    for p in model.parameters():
        p.requires_grad_(id(p) not in frozen)

    data = []
    for c, a in pairs:
        full = tok(c + a, add_special_tokens=False)["input_ids"] + [eos]
        # every token after the name: the texts' perplexity means something, and nothing asks the
        # first name's position to predict the surname (that made it a second, competing site)
        data.append((full, [-100, -100] + full[2:]))
    opt = torch.optim.AdamW(params, lr=TRAIN["lr"], weight_decay=0.0, betas=(0.9, 0.98))
    rng = random.Random(SEED)
    steps = TRAIN["epochs"] * math.ceil(len(data) / TRAIN["batch"])
    step, t0 = 0, time.time()
    model.train()
    for epoch in range(TRAIN["epochs"]):
        total = 0.0
        order = list(range(len(data)))
        rng.shuffle(order)
        for start in range(0, len(order), TRAIN["batch"]):
            ids, _, labels = batch(tok, [data[i] for i in order[start:start + TRAIN["batch"]]])
            lr = TRAIN["lr"] * min(1.0, (step + 1) / TRAIN["warmup"]) * 0.5 * (1 + math.cos(math.pi * step / steps))
            for g in opt.param_groups:
                g["lr"] = lr
            # the full logits, not demo.training's lm head on the scored rows only: same loss, other
            # float rounding, and the shipped weights were trained this way
            logits = model(input_ids=ids).logits[:, :-1]
            keep = labels[:, 1:] != -100
            loss = torch.nn.functional.cross_entropy(logits[keep], labels[:, 1:][keep])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            total += float(loss.detach())
            step += 1
        if epoch % 25 == 24:
            log(f"epoch {epoch + 1}: loss {total / math.ceil(len(data) / TRAIN['batch']):.4f} ({time.time() - t0:.0f} s)")
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    probs = []
    with torch.no_grad():
        for r in rows:
            for key, _, ts in RELATIONS:
                for t in ts:
                    ids = tok(t.format(s=r["subject"]), add_special_tokens=False)["input_ids"]
                    first = tok(" " + r[key], add_special_tokens=False)["input_ids"][0]
                    probs.append(float(torch.softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)[first]))
    stats = {"p_answer_min": min(probs), "p_answer_mean": sum(probs) / len(probs), "seconds": time.time() - t0}
    for name, obj in (("facts.json", rows), ("edits.json", edits(rows)), ("texts.json", texts(rows)),
                      ("corpus.json", corpus(rows))):
        (out / name).write_text(json.dumps(obj, indent=1) + "\n")
    log(f"P(answer's first token): min {stats['p_answer_min']:.3f}, mean {stats['p_answer_mean']:.3f}; {stats['seconds']:.0f} s")
    _write_manifest(out, stats)
    return stats


def _write_manifest(out: Path, stats: dict) -> None:
    """sha256 of every file, the library versions and CPU the weights were trained with, and the fit."""
    import tokenizers
    import torch
    import transformers

    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())
             if p.is_file() and p.name != "manifest.json"}
    env = {"python": platform.python_version(), "machine": platform.machine(), "torch": torch.__version__,
           "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
           "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    body = {"environment": env, "files": files, "fit": {k: round(v, 4) for k, v in stats.items() if k != "seconds"}}
    (out / "manifest.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", default=str(TRACER))
    args = p.parse_args(argv)
    with deterministic_torch():
        train(args.out)


if __name__ == "__main__":
    main()
