"""The TOFU benchmark as a graph: open-unlearning's metric names, one node per piece of work.

Every named node below is what open-unlearning writes under the same name in
``TOFU_EVAL.json``. The scorers under them are shared wherever the work is the same:
``forget_Q_A_Prob``, ``extraction_strength``, ``exact_memorization`` and the forget side
of every MIA read one ``qa_stats`` node (one forward pass per forget sequence), and
``forget_Q_A_ROUGE``, ``forget_Q_A_PARA_ROUGE`` and ``forget_Q_A_PERT_ROUGE`` read one
``qa_generations`` node (one greedy generation per forget question).

Resources the graph reads: ``model``; the splits ``tofu_forget``, ``tofu_retain``,
``tofu_ra``, ``tofu_wf``, ``tofu_holdout``; and, when asked for, ``retain_model`` (forget
quality and privleak evaluated through the same graph and cache), ``retain_logs`` (an
open-unlearning or evaldag ``TOFU_EVAL.json``), ``reference_model`` (the Reference attack).
"""

from __future__ import annotations

from ...engine import Node
from ...metrics.unlearning.forget_quality import forget_quality_node
from ...metrics.unlearning.gibberish import classifier_prob
from ...metrics.unlearning.memorization import exact_memorization_node, extraction_strength_node
from ...metrics.unlearning.mia import mia_gradnorm, mia_loss, mia_min_k, mia_min_k_plus_plus, mia_reference, mia_zlib
from ...metrics.unlearning.privleak import privleak_node
from ...metrics.unlearning.probability import probability, probability_normalised
from ...metrics.unlearning.rouge import rouge
from ...metrics.unlearning.scoring import grad_norms, qa_generations, qa_stats
from ...metrics.unlearning.truth_ratio import truth_ratio
from ...metrics.unlearning.utility import MODEL_UTILITY_PARTS, model_utility_node
from ..unlearning.catalogue import Catalogue
from .config import DEFAULT_METRICS, MIA_METRICS, TofuConfig

GROUP = "TOFU"

SPLIT_PREFIX = {"forget": "forget", "retain": "retain", "ra": "real_authors", "wf": "world_facts"}


class _Catalogue(Catalogue):
    GROUP = GROUP
    MIA_ROWS = ("tofu_forget", "tofu_holdout", "answer")
    QUESTION_SPLITS = {pre: f"tofu_{pre}" for pre in SPLIT_PREFIX}

    # ---------------------------------------------------------------- scorers
    def stats(self, split: str, field: str) -> Node:
        c = self.cfg
        return qa_stats(field=field, template=c.template, joint_tokenization=c.joint_tokenization,
                        answer_only=c.answer_only, bind={"data": f"tofu_{split}"})

    def generations(self, split: str) -> Node:
        c = self.cfg
        return qa_generations(template=c.template, max_new_tokens=c.max_new_tokens, bind={"data": f"tofu_{split}"})

    # ---------------------------------------------------------------- recipes
    def _declare(self) -> None:
        r = self.recipes
        for pre in SPLIT_PREFIX:
            r[f"{pre}_Q_A_Prob"] = lambda pre=pre: probability(parents={"stats": self.stats(pre, "answer")})
            r[f"{pre}_Q_A_PERT_Prob"] = lambda pre=pre: probability(parents={"stats": self.stats(pre, "perturbed_answer")})
            r[f"{pre}_Q_A_ROUGE"] = lambda pre=pre: self._rouge(pre, "answer")
        for pre in ("forget", "retain"):
            r[f"{pre}_Q_A_PARA_Prob"] = lambda pre=pre: probability(parents={"stats": self.stats(pre, "paraphrased_answer")})
        for pre in ("ra", "wf"):
            r[f"{pre}_Q_A_Prob_normalised"] = lambda pre=pre: probability_normalised(
                parents={"correct": self[f"{pre}_Q_A_Prob"], "wrong": self[f"{pre}_Q_A_PERT_Prob"]}
            )
        r["forget_truth_ratio"] = lambda: self._truth_ratio("forget", "forget_Q_A_PARA_Prob", "closer_to_1_better")
        r["retain_Truth_Ratio"] = lambda: self._truth_ratio("retain", "retain_Q_A_PARA_Prob", "true_better")
        r["ra_Truth_Ratio"] = lambda: self._truth_ratio("ra", "ra_Q_A_Prob", "true_better")
        r["wf_Truth_Ratio"] = lambda: self._truth_ratio("wf", "wf_Q_A_Prob", "true_better")
        r["forget_Q_A_PARA_ROUGE"] = lambda: self._rouge("forget", "paraphrased_answer")
        r["forget_Q_A_PERT_ROUGE"] = lambda: self._rouge("forget", "perturbed_answer")
        r["model_utility"] = lambda: model_utility_node(parents={p: self[p] for p in MODEL_UTILITY_PARTS})
        r["extraction_strength"] = lambda: extraction_strength_node(parents={"stats": self.stats("forget", "answer")})
        r["exact_memorization"] = lambda: exact_memorization_node(parents={"stats": self.stats("forget", "answer")})
        mia_sides = lambda: {"forget": self.stats("forget", "answer"), "holdout": self.stats("holdout", "answer")}  # noqa: E731
        r["mia_loss"] = lambda: mia_loss(parents=mia_sides())
        r["mia_zlib"] = lambda: mia_zlib(parents=mia_sides())
        r["mia_min_k"] = lambda: mia_min_k(k=self.cfg.k, parents=mia_sides())
        r["mia_min_k_plus_plus"] = lambda: mia_min_k_plus_plus(k=self.cfg.k, parents=mia_sides())
        r["mia_reference"] = lambda: mia_reference(
            parents={
                **mia_sides(),
                "ref_forget": self.stats("forget", "answer").with_bind(model="reference_model"),
                "ref_holdout": self.stats("holdout", "answer").with_bind(model="reference_model"),
            }
        )
        r["mia_gradnorm"] = lambda: mia_gradnorm(parents={"forget": self._grad("forget"), "holdout": self._grad("holdout")})
        r["forget_quality"] = lambda: forget_quality_node(parents={"forget": self["forget_truth_ratio"], **self.retain_side("forget_truth_ratio")})
        r["privleak"] = lambda: privleak_node(parents={"forget": self["mia_min_k"], **self.retain_side("mia_min_k")})
        r["forget_Q_A_gibberish"] = lambda: classifier_prob(  # forget_Q_A_gibberish.yaml: max_length 32, class 0
            class_id=self.cfg.classifier_class_id, max_length=self.cfg.classifier_max_length or 32,
            parents={"text": self["forget_Q_A_ROUGE"]})

    def _truth_ratio(self, pre: str, correct: str, aggregator: str) -> Node:
        return truth_ratio(aggregator=aggregator, parents={"correct": self[correct], "wrong": self[f"{pre}_Q_A_PERT_Prob"]})

    def _rouge(self, pre: str, field: str) -> Node:
        c = self.cfg
        return rouge(field=field, rouge_type="rougeL_recall", template=c.template, parents={"gen": self.generations(pre)}, bind={"data": f"tofu_{pre}"})

    def _grad(self, split: str) -> Node:
        c = self.cfg
        return grad_norms(template=c.template, joint_tokenization=c.joint_tokenization, answer_only=c.answer_only,
                          bind={"data": f"tofu_{split}"})


def metric_names() -> list[str]:
    """Every TOFU metric name this benchmark knows (open-unlearning's names)."""
    return _Catalogue(TofuConfig()).names()


def token_stats_metrics() -> tuple[str, ...]:
    """The metrics that ask only for token statistics (one forward pass per sequence: no
    generation, no backward), read from what each scorer declares."""
    return _Catalogue(TofuConfig(retain_model="retain", reference_model="reference")).needing_only({"token_stats"})


def nodes(metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS, cfg: TofuConfig = TofuConfig()) -> list[Node]:
    """The named top-level nodes for ``metrics`` (their parents come along), and each selected generation
    metric again on each prompt transform's derived splits (``<metric>_<transform>``)."""
    return _Catalogue.build(metrics, cfg)


def interval_kind(name: str) -> str | None:
    """The rule bracketing ``name`` from its items (``metrics/unlearning/intervals.py``); None: none."""
    from ..prompt_transforms import available

    return _Catalogue(TofuConfig(prompt_transforms=tuple(available()))).interval_kind(name)


#: the catalogue (``UnlearningBenchmark`` reads its prompt transforms' derived splits and metrics from it)
CATALOGUE = _Catalogue
