"""ROUGE between a greedy generation and the ground truth.

Mirrors open-unlearning at commit d3d7cf9, ``src/evals/metrics/utils.py:251-330``
(``eval_text_similarity``) and ``memorization.py:75-104`` (``rouge``):

* the generation is the new tokens decoded with ``skip_special_tokens=True,
  clean_up_tokenization_spaces=True``; it is then cut, in this order, at the decoded
  eos string (``tokenizer.decode([eos_id])``) and at each stopword in list order
  (``text.split(word)[0]`` when present), and only then stripped;
* the ground truth is ``decode(labels).replace(decode(prompt_ids), "").strip()`` (both
  decoded with the same two flags): ``str.replace`` removes *every* occurrence of the
  prompt text, not only the leading one;
* ``RougeScorer(["rouge1", "rougeL"], use_stemmer=True).score(gt, gen)`` (target first),
  stored as ``rouge1_recall``, ``rougeL_f1`` and ``rougeL_recall``. TOFU reports
  ``rougeL_recall``, MUSE ``rougeL_f1``.

The text cutting happens here and not in the generation request, so a cached
generation serves every stopword set. The pure functions need ``rouge_score`` only; ``rouge`` below applies them to a
``qa_generations`` node.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping, Sequence

from ...engine import Params, Result, metric
from ...engine.knowledge import as_is
from ...engine.adapters.base import PromptTemplate
from .blocks import index_keys, mean_of_field, with_reason
from .scoring import prefill_ids, qa_generations

ROUGE_FIELDS = ("rouge1_recall", "rougeL_f1", "rougeL_recall")
MUSE_STOPWORDS = ("\n\n", "\nQuestion", "Question:")  # configs/eval/muse_metrics/*knowmem_ROUGE.yaml


@lru_cache(maxsize=1)
def _scorer() -> Any:
    """``RougeScorer(["rouge1", "rougeL"], use_stemmer=True)`` with its own tokenizer, memoised.

    rouge-score tokenizes both texts on every ``score`` call and stems every word anew;
    a TOFU run scores each generation against up to 6 ground truths and the same words
    recur, so the Porter stems took most of ROUGE's time. :class:`_MemoTokenizer` runs
    rouge-score's own ``tokenize`` with its own Porter stemmer and keeps the results:
    the same tokens, hence the same scores.
    """
    from rouge_score import rouge_scorer, tokenize, tokenizers  # here: only ROUGE metrics need them (they pull in nltk)
    from rouge_score.tokenizers import porter  # nltk's Porter stemmer, the one DefaultTokenizer uses

    class _MemoTokenizer(tokenizers.Tokenizer):
        def __init__(self) -> None:
            self.stem = lru_cache(maxsize=1 << 16)(porter.PorterStemmer().stem)  # tokenize() calls stemmer.stem(word)
            self._tokens = lru_cache(maxsize=1 << 14)(lambda text: tuple(tokenize.tokenize(text, self)))

        def tokenize(self, text: str) -> list[str]:
            return list(self._tokens(text))

    return rouge_scorer.RougeScorer(["rouge1", "rougeL"], tokenizer=_MemoTokenizer())


def clean_generation(text: str, eos_text: str | None = None, stopwords: Sequence[str] = ()) -> str:
    """Cut ``text`` at the eos string, then at each stopword in order, then strip.

    With ``skip_special_tokens=True`` the eos string is normally already gone; the cut
    matters when eos is not a special token (or is written out by the model as text).
    Empty stop strings are ignored, as open-unlearning's ``if word and ...`` does.
    """
    for word in ([eos_text] if eos_text else []) + list(stopwords):
        if word and word in text:
            text = text.split(word)[0]
    return text.strip()


def clean_ground_truth(full_text: str, prompt_text: str) -> str:
    """``full_text.replace(prompt_text, "").strip()``, open-unlearning's ground truth.

    ``full_text`` is the decoded labels (for QA: the whole conversation; for completion
    data: the scored continuation only), ``prompt_text`` the decoded generation input.
    """
    return full_text.replace(prompt_text, "").strip()


def rouge_scores(ground_truth: str, generation: str) -> dict[str, float]:
    """The three ROUGE numbers open-unlearning stores, ground truth as the target."""
    s = _scorer().score(ground_truth, generation)
    return {
        "rouge1_recall": float(s["rouge1"].recall),
        "rougeL_f1": float(s["rougeL"].fmeasure),
        "rougeL_recall": float(s["rougeL"].recall),
    }


def rouge_item(input_text: str, ground_truth: str, generation: str) -> dict[str, Any]:
    """One item in open-unlearning's shape: the three scores plus the three texts."""
    return {**rouge_scores(ground_truth, generation), "input": input_text, "ground_truth": ground_truth, "generation": generation}


def rouge_options_item(input_text: str, ground_truths: Sequence[str], generation: str) -> dict[str, Any]:
    """One item scored against K ground truths (forget_Q_A_PERT_ROUGE).

    open-unlearning generates K times from the same prompt (once per option mini-batch)
    and transposes the K results into lists; greedy decoding makes the K generations
    equal, so one generation scored K times gives the same lists.
    """
    singles = [rouge_item(input_text, gt, generation) for gt in ground_truths]
    return {f: [s[f] for s in singles] for f in (*ROUGE_FIELDS, "input", "ground_truth", "generation")}


def rouge_block(
    items: Sequence[Mapping[str, Any]], rouge_type: str = "rougeL_recall", indices: Sequence[Any] | None = None
) -> dict[str, Any]:
    """``agg_value`` = mean over items of ``rouge_type`` (options averaged first)."""
    if rouge_type not in ROUGE_FIELDS:
        raise ValueError(f"rouge_type must be one of {ROUGE_FIELDS}, not {rouge_type!r}")
    keys = index_keys(len(items), indices)
    vbi = {k: dict(item) for k, item in zip(keys, items)}
    return with_reason({"agg_value": mean_of_field(vbi, rouge_type), "value_by_index": vbi}, rouge_type, "ROUGE")


# ------------------------------------------------------------------ the metric


class RougeParams(Params):
    """Which ground truth to score against, and how the prompt was built (as the generation)."""

    field: str = "answer"  # ground-truth column; a list column gives one score per option
    rouge_type: str = "rougeL_recall"  # TOFU: rougeL_recall; MUSE: rougeL_f1
    stopwords: tuple[str, ...] = ()
    question_key: str = "question"
    template: PromptTemplate = PromptTemplate()
    fewshot: tuple[tuple[str, str], ...] = ()
    max_length: int = 512
    completion: bool = False  # prefix/text rows (MUSE verbmem) instead of question/answer rows
    prefix_key: str | None = "prompt"
    insert_space: bool = True


def _decode(enc: Any, ids: Any) -> str:
    return enc.decode([int(i) for i in ids], skip_special_tokens=True, clean_up_tokenization_spaces=True)


@metric("rouge", version="1", params=RougeParams, parents={"gen": qa_generations()}, needs=("model", "data"),
        knowledge=as_is("the overlap of the generated answer with the true one: more when the model can say it"))
def rouge(gen: dict, model: Any, data: list[dict], params: RougeParams) -> Result:
    """ROUGE of each greedy generation against the row's ground truth (the tokenizer only).

    The ground truth is rebuilt exactly as open-unlearning does: the labels decoded,
    the decoded prompt removed, stripped; so it needs the tokenizer, never the weights.
    """
    enc = model.encoder()
    eos_text = enc.decode([enc.eos_token_id], skip_special_tokens=False) if enc.eos_token_id is not None else None
    items = []
    for row, prompt_ids, text in zip(data, gen["prompt_ids"], gen["generations"]):
        inp = _decode(enc, prompt_ids)
        pre = prefill_ids(enc, row)  # a prefilled assistant turn: the gold answer follows the prompt without it
        unfilled = _decode(enc, prompt_ids[: len(prompt_ids) - len(pre)]) if pre else inp
        generation = clean_generation(text, eos_text, params.stopwords)
        answers = row[params.field]
        many = isinstance(answers, (list, tuple))
        gts, cut = [], 0
        for ans in answers if many else [answers]:
            if params.completion:
                prefix = row.get(params.prefix_key, "") if params.prefix_key else ""
                e = enc.encode_completion(prefix, ans, insert_space=params.insert_space)
                labels = e.continuation_ids
            else:
                e = enc.encode_qa(row[params.question_key], ans, params.template, fewshot=params.fewshot, max_length=params.max_length)
                labels = e.context_ids + e.continuation_ids
            gts.append(clean_ground_truth(_decode(enc, labels), unfilled))
            cut += e.truncated  # the ground truth is decoded from the cut labels
        item = rouge_options_item(inp, gts, generation) if many else rouge_item(inp, gts[0], generation)
        if cut > 0:  # only cut items get the key, so other outputs stay as open-unlearning's
            item["truncated_tokens"] = cut
        items.append(item)
    return Result.from_dict(rouge_block(items, params.rouge_type))
