"""Local lm-evaluation-harness tasks for the lmeval tests, written into a folder by the test.

Three tasks, one per output type, over a few rows of the TOFU fixture (the tiny Llama
fixture was trained on them, so its answers are not all noise):

* ``fx_mc`` -- ``multiple_choice`` (acc, acc_norm), one few-shot example from its own split;
* ``fx_gen`` -- ``generate_until`` (exact_match), ``until: ["\\n", "."]``, 12 new tokens;
* ``fx_roll`` -- ``loglikelihood_rolling`` (word_perplexity, byte_perplexity, bits_per_byte);

and ``fx_group``, a group of ``fx_mc0`` (``fx_mc`` without few-shot) and ``fx_mcq`` (the answer's last
word among the choices' last words, after the rest of the answer: short continuations, some of them greedy). ``dataset_path: json`` with
``data_files``: no hub access.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOFU = REPO / "tests" / "fixtures" / "tofu_tiny" / "forget10.json"
MODEL = REPO / "tests" / "fixtures" / "tiny-llama" / "target"
ROWS = 6


def need_lm_eval() -> None:
    """Skip locally without lm-evaluation-harness; fail under CI (it must have been installed)."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("lm-evaluation-harness is not installed in CI (pip install '.[lmeval]')", pytrace=False)
        pytest.skip("lm-evaluation-harness not installed (pip install 'evaldag[lmeval]')")


def _rows() -> list[dict]:
    rows = [json.loads(line) for line in TOFU.read_text().splitlines() if line.strip()][: ROWS + 2]
    out = []
    for i, r in enumerate(rows[:ROWS]):
        others = [rows[(i + k) % len(rows)]["answer"] for k in (1, 2)]
        choices = [r["answer"], *others]
        gold = i % 3  # the right answer in each position
        choices[0], choices[gold] = choices[gold], choices[0]
        out.append({"question": r["question"], "answer": r["answer"], "choices": choices, "gold": gold,
                    "stem": r["answer"].rsplit(" ", 1)[0], "words": [c.rsplit(" ", 1)[1] for c in choices]})
    return out


def write_tasks(root: Path) -> Path:
    """The task folder (YAML files and one data file); returns it for --include-path."""
    root.mkdir(parents=True, exist_ok=True)
    data = root / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    common = (f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
              "test_split: test\n")
    (root / "fx_mc.yaml").write_text(
        "task: fx_mc\n" + common + "fewshot_split: test\nnum_fewshot: 1\noutput_type: multiple_choice\n"
        "doc_to_text: \"Question: {{question}}\\nAnswer:\"\ndoc_to_choice: \"{{choices}}\"\ndoc_to_target: gold\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\n")
    (root / "fx_gen.yaml").write_text(
        "task: fx_gen\n" + common + "output_type: generate_until\n"
        "doc_to_text: \"Question: {{question}}\\nAnswer:\"\ndoc_to_target: \" {{answer}}\"\n"
        "generation_kwargs:\n  until: [\"\\n\", \".\"]\n  max_gen_toks: 12\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n")
    (root / "fx_roll.yaml").write_text(
        "task: fx_roll\n" + common + "output_type: loglikelihood_rolling\n"
        "doc_to_text: \"\"\ndoc_to_target: \"{{question}} {{answer}}\"\n"
        "metric_list:\n  - metric: word_perplexity\n  - metric: byte_perplexity\n  - metric: bits_per_byte\n")
    (root / "fx_mc0.yaml").write_text((root / "fx_mc.yaml").read_text().replace("task: fx_mc", "task: fx_mc0")
                                      .replace("num_fewshot: 1", "num_fewshot: 0"))
    (root / "fx_mcq.yaml").write_text((root / "fx_mc0.yaml").read_text().replace("task: fx_mc0", "task: fx_mcq")
                                      .replace("Answer:", "Answer: {{stem}}").replace("{{choices}}", "{{words}}"))
    (root / "fx_group.yaml").write_text(
        "group: fx_group\ntask:\n  - fx_mc0\n  - fx_mcq\naggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\n")
    return root
