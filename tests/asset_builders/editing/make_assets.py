"""Write the shipped edit set and text set (``data/edits.json``, ``data/texts.json``).

    python -m tests.asset_builders.editing.make_assets

Both are made from the demo's invented authors (benchmarks/demo/authors.py, same seed),
so the demo checkpoints know the true answers: each edit moves a retain author's
birthplace to another city of the pool, in the demo's question/answer format (prompts
end with a space: the demo tokenizer keeps a word's trailing space). Paraphrases use the
demo's paraphrased templates; the neighbourhood prompts ask two unedited authors'
birthplaces, each with its own true answer. The texts are the retain authors' other facts. Deterministic.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from evaldag.benchmarks.editing.data import SHIPPED_EDITS

from ..demo import authors
from ..demo.training import prompt_of

HERE = SHIPPED_EDITS.parent  # the package's data folder, which `evaldag run editing` reads
N_EDITS, N_NEIGHBOURS, N_TEXTS, SEED = 8, 2, 40, 20250117


def _prefix(template: str, name: str) -> str:
    """An answer template cut before its value: ``"{n} was born in {v}."`` -> ``"X was born in "``."""
    return template.split("{v}")[0].format(n=name)


def _ask(question: str, answer_template: str, name: str) -> str:
    return prompt_of(question.format(n=name)) + _prefix(answer_template, name)


def build(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    data = authors.build()
    retain = data.retain_authors
    fact = next(f for f in authors.FACTS if f.key == "birthplace")
    rng = random.Random(seed)
    edits = []
    for i, a in enumerate(retain[:N_EDITS]):
        name = a["name"]
        new = rng.choice([c for c in authors.CITIES if c != a["birthplace"]])
        rest = retain[N_EDITS:]  # neighbours are never edited themselves
        others = [rest[(N_NEIGHBOURS * i + k) % len(rest)] for k in range(N_NEIGHBOURS)]
        edits.append({
            "case_id": i,
            "prompt": _ask(fact.question, fact.answer, name),
            "subject": name,
            "target_true": a["birthplace"],
            "target_new": new,
            "paraphrase_prompts": [_ask(fact.paraphrased_question, fact.paraphrased_answer, name)],
            "neighborhood_prompts": [{"prompt": _ask(fact.question, fact.answer, b["name"]), "target_true": b["birthplace"]}
                                     for b in others],
        })
    texts = [{"text": f.answer.format(n=a["name"], v=a[f.key])} for a in retain for f in authors.FACTS
             if f.key not in ("birthplace", "home")][:N_TEXTS]
    return edits, texts


def main() -> None:
    edits, texts = build()
    HERE.mkdir(parents=True, exist_ok=True)
    (HERE / "edits.json").write_text(json.dumps(edits, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (HERE / "texts.json").write_text(json.dumps(texts, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(edits)} edits and {len(texts)} texts to {HERE}")


if __name__ == "__main__":
    main()
