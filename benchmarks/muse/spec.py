"""The MUSE benchmark as a graph, on the same scorers and cache as TOFU.

open-unlearning's ``configs/eval/muse.yaml`` and ``muse_metrics/*``: knowledge
memorization (few-shot QA with *all* ICL rows in the prompt, 32 new tokens, stop
strings honoured during generation, rougeL_f1), verbatim memorization (continue a
prefix for 128 tokens, rougeL_f1), privleak (Min-K% k=0.4 on privleak forget vs holdout,
against the retain model), extraction strength and exact memorization on verbmem.

Resources: ``model``; ``muse_verbmem_forget``, ``muse_knowmem_forget_qa``,
``muse_knowmem_retain_qa``, ``muse_privleak_forget``, ``muse_privleak_holdout``; and, when
asked for, ``retain_model``, ``retain_logs``, ``reference_model``. The ICL rows are
params of the knowmem nodes (their content is part of the fingerprint).
"""

from __future__ import annotations

from ...engine import Node
from ...metrics.unlearning.gibberish import classifier_prob
from ...metrics.unlearning.memorization import exact_memorization_node, extraction_strength_node
from ...metrics.unlearning.mia import mia_gradnorm, mia_loss, mia_min_k, mia_min_k_plus_plus, mia_reference, mia_zlib
from ...metrics.unlearning.privleak import privleak_node
from ...metrics.unlearning.rouge import MUSE_STOPWORDS, rouge
from ...metrics.unlearning.scoring import completion_generations, completion_stats, grad_norms, qa_generations
from ..unlearning.catalogue import Catalogue
from .config import DEFAULT_METRICS, MIA_METRICS, MuseConfig

GROUP = "MUSE"


class _Catalogue(Catalogue):
    GROUP = GROUP
    MIA_ROWS = ("muse_privleak_forget", "muse_privleak_holdout", "text")
    #: verbmem is not one: its rows are passages to continue (a prefill or a rewritten question has no place there)
    QUESTION_SPLITS = {"knowmem_forget": "muse_knowmem_forget_qa", "knowmem_retain": "muse_knowmem_retain_qa"}
    ROUGE_FIELD = "rougeL_f1"

    def _declare(self) -> None:
        c, r = self.cfg, self.recipes
        for side, icl in (("forget", c.forget_icl), ("retain", c.retain_icl)):
            r[f"{side}_knowmem_ROUGE"] = lambda side=side, icl=icl: self._knowmem(side, icl)
        r["forget_verbmem_ROUGE"] = self._verbmem
        verbmem = lambda: completion_stats(prefix_key="prompt", text_key="gt", insert_space=True, bind={"data": "muse_verbmem_forget"})  # noqa: E731
        r["extraction_strength"] = lambda: extraction_strength_node(parents={"stats": verbmem()})
        r["exact_memorization"] = lambda: exact_memorization_node(parents={"stats": verbmem()})
        sides = lambda model="model": {  # noqa: E731
            side: completion_stats(prefix_key=None, text_key="text", insert_space=False, bind={"data": f"muse_privleak_{side}", "model": model})
            for side in ("forget", "holdout")
        }
        r["mia_loss"] = lambda: mia_loss(parents=sides())
        r["mia_zlib"] = lambda: mia_zlib(parents=sides())
        r["mia_min_k"] = lambda: mia_min_k(k=c.k, parents=sides())
        r["mia_min_k_plus_plus"] = lambda: mia_min_k_plus_plus(k=c.k, parents=sides())
        r["mia_reference"] = lambda: mia_reference(
            parents={**sides(), **{f"ref_{s}": n for s, n in sides("reference_model").items()}}
        )
        r["mia_gradnorm"] = lambda: mia_gradnorm(
            parents={
                s: grad_norms(completion=True, prefix_key=None, text_key="text", insert_space=False, bind={"data": f"muse_privleak_{s}"})
                for s in ("forget", "holdout")
            }
        )
        r["privleak"] = lambda: privleak_node(parents={"forget": self["mia_min_k"], **self.retain_side("mia_min_k")})
        r["forget_gibberish"] = lambda: classifier_prob(  # muse_metrics/forget_gibberish.yaml: max_length 512, class 0
            class_id=c.classifier_class_id, max_length=c.classifier_max_length or 512,
            parents={"text": self["forget_verbmem_ROUGE"]})

    def _knowmem(self, side: str, icl: tuple[tuple[str, str], ...]) -> Node:
        c = self.cfg
        data = {"data": f"muse_knowmem_{side}_qa"}
        gen = qa_generations(template=c.template, max_new_tokens=c.knowmem_new_tokens, stop_strings=MUSE_STOPWORDS, fewshot=icl, bind=data)
        return rouge(field="answer", rouge_type="rougeL_f1", stopwords=MUSE_STOPWORDS, template=c.template, fewshot=icl, parents={"gen": gen}, bind=data)

    def _verbmem(self) -> Node:
        c = self.cfg
        data = {"data": "muse_verbmem_forget"}
        gen = completion_generations(prefix_key="prompt", text_key="gt", insert_space=True, max_new_tokens=c.verbmem_new_tokens, bind=data)
        return rouge(field="gt", rouge_type="rougeL_f1", completion=True, prefix_key="prompt", insert_space=True, parents={"gen": gen}, bind=data)


def metric_names() -> list[str]:
    return _Catalogue(MuseConfig()).names()


def token_stats_metrics() -> tuple[str, ...]:
    """The metrics that ask only for token statistics (one forward pass per sequence: no
    generation, no backward), read from what each scorer declares."""
    return _Catalogue(MuseConfig(retain_model="retain", reference_model="reference")).needing_only({"token_stats"})


def nodes(metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS, cfg: MuseConfig = MuseConfig()) -> list[Node]:
    return _Catalogue.build(metrics, cfg)


def interval_kind(name: str) -> str | None:
    """The rule bracketing ``name`` from its items (``metrics/unlearning/intervals.py``); None: none."""
    from ..prompt_transforms import available

    return _Catalogue(MuseConfig(prompt_transforms=tuple(available()))).interval_kind(name)


#: the catalogue (``UnlearningBenchmark`` reads its prompt transforms' derived splits and metrics from it)
CATALOGUE = _Catalogue
