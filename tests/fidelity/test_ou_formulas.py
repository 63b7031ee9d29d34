"""open-unlearning's formulas, three ways.

1. Hand-computed unit tests of every formula, quirks included.
2. Log replay: fed open-unlearning's own per-item results (``tests/fixtures/open_unlearning``),
   our aggregators give its aggregate numbers bit for bit.
3. Fidelity: the fixture checkpoints scored *without the engine* by a test-local helper that
   tokenizes, forwards and generates as open-unlearning does; our formulas then reproduce
   ``<model>_TOFU_EVAL.json`` and ``<model>_MUSE_EVAL.json`` (the numbers are in
   docs/gotchas.md). The helper is written for this test only; the engine has its own.
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import hmean, ks_2samp

from evaldag.benchmarks.muse.data import fewshot_pairs, load_muse
from evaldag.benchmarks.tofu.data import load_tofu
from evaldag.metrics.unlearning import blocks as B
from evaldag.metrics.unlearning import forget_quality as FQ
from evaldag.metrics.unlearning import memorization as M
from evaldag.metrics.unlearning import mia as P
from evaldag.metrics.unlearning import privleak as PL
from evaldag.metrics.unlearning import probability as L
from evaldag.metrics.unlearning import rouge as G
from evaldag.metrics.unlearning import truth_ratio as TR
from evaldag.metrics.unlearning import utility as U

FIX = Path(__file__).parents[1] / "fixtures"
OU = FIX / "open_unlearning"


def ou_logs(model: str, bench: str) -> dict:
    return json.loads((OU / f"{model}_{bench}_EVAL.json").read_text())


# =============================================================== 1. hand-computed values


def test_avg_loss_and_prob_include_every_token_and_nan_when_empty():
    lp = [math.log(0.5), math.log(0.25), math.log(1.0)]  # last one plays the eos
    assert L.avg_loss(lp) == pytest.approx((math.log(2) + math.log(4)) / 3)
    item = L.probability_item(lp)
    assert item["prob"] == pytest.approx((0.5 * 0.25 * 1.0) ** (1 / 3))
    empty = L.probability_item([])
    assert math.isnan(empty["prob"]) and math.isnan(empty["avg_loss"]) and "no scored tokens" in empty["reason"]
    block = L.probability_block([lp, []])
    assert math.isnan(block["agg_value"]) and "['1']" in block["reason"]


def test_perturbed_probability_is_mean_of_probabilities():
    opts = [[math.log(0.5)], [math.log(0.1)]]
    block = L.probability_options_block([opts, [[math.log(0.2)], [math.log(0.4)]]])
    assert block["value_by_index"]["0"]["prob"] == pytest.approx([0.5, 0.1])
    assert block["agg_value"] == pytest.approx(((0.5 + 0.1) / 2 + (0.2 + 0.4) / 2) / 2)


def test_truth_ratio_uses_geometric_mean_of_wrong_options():
    correct = {"0": {"avg_loss": 0.5}, "1": {"avg_loss": 2.0}}
    wrong = {"0": {"avg_loss": [1.0, 3.0]}, "1": {"avg_loss": [0.5, 0.5]}}
    tr0 = math.exp(-2.0) / (math.exp(-0.5) + 1e-10)  # exp(-mean loss) = geometric mean of p
    tr1 = math.exp(-0.5) / (math.exp(-2.0) + 1e-10)
    b = TR.truth_ratio_block(correct, wrong, "closer_to_1_better")
    assert b["value_by_index"]["0"]["score"] == pytest.approx(tr0)
    assert b["agg_value"] == pytest.approx((tr0 + 1 / (tr1 + 1e-10)) / 2)
    assert TR.truth_ratio_block(correct, wrong, "true_better")["agg_value"] == pytest.approx((1 - tr0 + 0) / 2)
    pm = TR.truth_ratio_block(correct, wrong, "prob_mean")
    pc, pw = math.exp(-0.5), math.exp(-2.0)
    assert pm["value_by_index"]["0"]["score"] == pytest.approx(pc / (pc + pw + 1e-10))
    with pytest.raises(ValueError, match="aggregator"):
        TR.truth_ratio_block(correct, wrong, "mean")
    with pytest.raises(ValueError, match="different rows"):
        TR.truth_ratio_block(correct, {"0": wrong["0"]})


def test_normalised_probability_sums_wrong_options():
    b = L.normalised_probability_block({"0": {"prob": 0.6}}, {"0": {"prob": [0.1, 0.3]}})
    assert b["agg_value"] == pytest.approx(0.6 / (0.6 + 0.4 + 1e-10))


@pytest.mark.parametrize(
    "preds, labels, expected",
    [
        ([1, 2, 3, 4, 9], [1, 2, 3, 4, 0], 1.0),  # last token (eos) is dropped: all 4 match
        ([0, 2, 3, 4, 9], [1, 2, 3, 4, 0], 1 - 1 / 4),  # suffix from k=1
        ([1, 2, 3, 0, 9], [1, 2, 3, 4, 0], 1 / 4),  # nothing matches: k stays n-1 -> 1/n, not 0
        ([1, 2, 0, 4, 9], [1, 2, 3, 4, 0], 1 / 4),  # only the 1-token suffix matches: also 1/n
        ([7], [7], 0.0),  # n = 0 after the drop
    ],
)
def test_extraction_strength_quirks(preds, labels, expected):
    assert M.extraction_strength(preds, labels) == pytest.approx(expected)


def test_memorization_options_beyond_open_unlearning():
    nothing = ([1, 2, 3, 0, 9], [1, 2, 3, 4, 0])
    assert M.extraction_strength(*nothing, strict=True) == 0.0  # k = n when no suffix matches
    assert M.extraction_strength([1, 2, 3, 4, 0], [1, 2, 3, 4, 0], exclude_last=False) == 1.0
    assert M.exact_memorization([1, 2, 3, 4, 9], [1, 2, 3, 4, 0], exclude_last=False) == pytest.approx(4 / 5)
    assert P.mia_min_k_score([-1.0, -5.0], k=0.5, exclude_last=False) == 5.0


def test_exact_memorization_drops_last_and_is_none_when_empty():
    assert M.exact_memorization([1, 0, 3, 5], [1, 2, 3, 4]) == pytest.approx(2 / 3)
    assert M.exact_memorization([1], [1]) is None
    b = M.exact_memorization_block([[1, 0, 3, 5], [1]], [[1, 2, 3, 4], [1]])
    assert b["agg_value"] == pytest.approx(2 / 3) and b["value_by_index"]["1"]["score"] is None


def test_mia_scores_by_hand():
    lp = np.log([0.9, 0.1, 0.5, 0.2, 0.7, 1.0])  # last one is dropped by Min-K
    assert P.mia_loss_score(lp) == pytest.approx(-np.mean(lp))
    assert P.mia_zlib_score(lp, "abc") == pytest.approx(-np.mean(lp) / len(zlib.compress(b"abc")))
    # n = 5, k = 0.4 -> int(2.0) = 2 lowest: log 0.1, log 0.2
    assert P.mia_min_k_score(lp, k=0.4) == pytest.approx(-(math.log(0.1) + math.log(0.2)) / 2)
    assert P.mia_min_k_score(lp, k=0.1) == pytest.approx(-math.log(0.1))  # max(1, int(0.5))
    assert P.mia_min_k_score([-3.0], k=0.4) == 0.0  # only the dropped token: empty -> 0
    mu = np.array([-0.5, -1.0, -0.5, -1.0, -0.2, 0.0])
    var = np.array([0.25, 1.0, 1e-9, 4.0, 0.04, 0.0])
    z = (lp - mu) / np.sqrt(np.maximum(var, 1e-6))
    assert P.mia_min_k_plus_plus_score(lp, mu, var, k=0.4) == pytest.approx(-np.mean(np.sort(z[:5])[:2]))
    assert P.mia_min_k_plus_plus_score([-1.0], [0.0], [1.0], k=0.4) == 0.0
    assert P.mia_reference_score([-1.0, -3.0], [-0.5, -0.5]) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        P.mia_min_k_score(lp, k=0)


def _pairwise_auc(f, h):
    return sum((hv > fv) + 0.5 * (hv == fv) for fv in f for hv in h) / (len(f) * len(h))


def test_auc_matches_pairwise_count_and_sklearn_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        f, h = rng.integers(0, 4, size=7).astype(float), rng.integers(0, 4, size=5).astype(float)
        assert P.auc(f, h) == pytest.approx(_pairwise_auc(f, h), abs=1e-12)
    # sklearn 1.9.1 roc_auc_score([0]*3 + [1]*3, scores), computed in a throwaway venv
    assert P.auc([1, 2, 2], [2, 3, 0]) == pytest.approx(0.5555555555555556, abs=1e-15)
    assert P.auc([0.1, 0.4, 0.35, 0.8], [0.8, 0.8, 0.2]) == pytest.approx(0.6666666666666666, abs=1e-15)
    assert P.auc([3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5]) == pytest.approx(0.7833333333333333, abs=1e-15)
    assert P.auc([1, 1], [1, 1]) == 0.5
    with pytest.raises(ValueError, match="holdout side has no scores"):
        P.auc([1.0], [])
    with pytest.raises(ValueError, match="NaN"):
        P.auc([1.0, float("nan")], [2.0])


def test_mia_block_shape():
    b = P.mia_block([1.0, 2.0], [3.0], holdout_indices=[7])
    assert list(b) == ["forget", "holdout", "auc", "agg_value"]
    assert b["forget"] == {"agg_value": 1.5, "value_by_index": {"0": {"score": 1.0}, "1": {"score": 2.0}}}
    assert b["holdout"]["value_by_index"] == {"7": {"score": 3.0}} and b["auc"] == b["agg_value"] == 1.0


def test_forget_quality_privleak_and_model_utility():
    a, b = [0.1, 0.5, 0.9, 1.2], [0.2, 0.3, 2.0]
    assert FQ.forget_quality(a, b)["agg_value"] == ks_2samp(a, b).pvalue
    none = FQ.forget_quality({"0": {"score": 0.1}})
    assert none["agg_value"] is None and "retain" in none["reason"]
    assert PL.privleak(0.8, 0.6)["agg_value"] == pytest.approx((0.2 - 0.4) / (0.4 + 1e-10) * 100)
    assert PL.privleak(0.42875)["agg_value"] == pytest.approx(14.25, abs=1e-6)  # r = 1 - 0.5
    assert "0.5" in PL.privleak(0.3)["reason"]
    vals = [0.5, 0.9, 0.3]
    assert U.harmonic_mean(vals)["agg_value"] == pytest.approx(hmean(vals))
    assert U.harmonic_mean([0.5, 0.0, 0.9])["agg_value"] == 0.0
    assert "b" in U.harmonic_mean({"a": 0.5, "b": float("nan")})["reason"]
    with pytest.raises(ValueError, match="missing"):
        U.model_utility({"retain_Q_A_Prob": 0.5})


def test_rouge_cleaning_order_and_scores():
    eos = "<|endoftext|>"
    text = " Paris is nice.\n\nQuestion: next<|endoftext|>junk"
    assert G.clean_generation(text, eos, G.MUSE_STOPWORDS) == "Paris is nice."
    assert G.clean_generation("  a\nQuestion b ", None, ["\nQuestion"]) == "a"  # cut, then strip
    assert G.clean_generation(" a b ", eos, ["", "\n\n"]) == "a b"
    # str.replace drops every copy of the prompt, not only the leading one
    assert G.clean_ground_truth("Q: x\nA: y Q: x\nA: ", "Q: x\nA: ") == "y"
    s = G.rouge_scores("the cat sat on the mat", "the cats sat")
    assert s["rouge1_recall"] == pytest.approx(3 / 6)  # stemmer: cats -> cat
    assert s["rougeL_recall"] == pytest.approx(3 / 6) and s["rougeL_f1"] == pytest.approx(2 * 1 * 0.5 / 1.5)
    item = G.rouge_options_item("in", ["the cat", "a dog"], "the cat")
    assert item["rougeL_recall"] == [1.0, 0.0]
    assert G.rouge_block([item], "rougeL_recall")["agg_value"] == pytest.approx(0.5)


def test_rouge_memoised_tokenizer_scores_as_rouge_score_does():
    """evaldag's scorer keeps rouge-score's tokens (memoised); scores equal a plain RougeScorer's."""
    from rouge_score import rouge_scorer

    plain = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    texts = ["The cats were running happily", "", "  ", "Café au lait, naïve résumé!", "running runner runs ran",
             "It's 3:45 p.m. -- generalization, generalizations; GENERALIZED", "the the the cat", "a b c"]
    for _ in range(2):  # the second round is served from the memo
        for gt in texts:
            for gen in texts:
                assert G._scorer().score(gt, gen) == plain.score(gt, gen), (gt, gen)


# =============================================================== 2. replay of open-unlearning's own logs


@pytest.mark.parametrize("model", ["target", "retain"])
def test_replay_tofu_aggregates_bit_for_bit(model):
    d = ou_logs(model, "TOFU")
    v = lambda name: d[name]["value_by_index"]  # noqa: E731
    got = {
        "forget_truth_ratio": TR.truth_ratio_block(v("forget_Q_A_PARA_Prob"), v("forget_Q_A_PERT_Prob"), "closer_to_1_better"),
        "retain_Truth_Ratio": TR.truth_ratio_block(v("retain_Q_A_PARA_Prob"), v("retain_Q_A_PERT_Prob"), "true_better"),
    }
    for pre in ("ra", "wf"):
        got[f"{pre}_Truth_Ratio"] = TR.truth_ratio_block(v(f"{pre}_Q_A_Prob"), v(f"{pre}_Q_A_PERT_Prob"), "true_better")
        got[f"{pre}_Q_A_Prob_normalised"] = L.normalised_probability_block(v(f"{pre}_Q_A_Prob"), v(f"{pre}_Q_A_PERT_Prob"))
    for name in ("forget_Q_A_PERT_Prob", "extraction_strength", "exact_memorization"):
        field = "prob" if "Prob" in name else "score"
        got[name] = {"agg_value": B.mean_of_field(v(name), field)}
    got["model_utility"] = U.model_utility({p: d[p] for p in U.MODEL_UTILITY_PARTS})
    for name in [k for k in d if k.endswith("ROUGE")]:
        items = [
            G.rouge_options_item(it["input"][0], it["ground_truth"], it["generation"][0])
            if isinstance(it["ground_truth"], list) else G.rouge_item(it["input"], it["ground_truth"], it["generation"])
            for it in v(name).values()
        ]
        got[name] = G.rouge_block(items, "rougeL_recall")
        assert got[name]["value_by_index"] == v(name), name
    for name in [k for k in d if k.startswith("mia_")]:
        scores = [[s["score"] for s in d[name][side]["value_by_index"].values()] for side in ("forget", "holdout")]
        got[name] = {"agg_value": P.auc(*scores)}
    retain = ou_logs("retain", "TOFU")
    if model == "target":
        got["forget_quality"] = FQ.forget_quality(v("forget_truth_ratio"), retain["forget_truth_ratio"]["value_by_index"])
        got["privleak"] = PL.privleak(d["mia_min_k"]["agg_value"], retain["mia_min_k"]["agg_value"])
    else:
        got["privleak"] = PL.privleak(d["mia_min_k"]["agg_value"])
    for name, block in got.items():
        assert block["agg_value"] == pytest.approx(d[name]["agg_value"], rel=1e-12, abs=1e-15), name
        if name.endswith(("Truth_Ratio", "truth_ratio")):
            ours = [x["score"] for x in block["value_by_index"].values()]
            assert ours == pytest.approx([x["score"] for x in v(name).values()], rel=1e-12), name


# =============================================================== 3. fidelity on the fixture checkpoints
#
# The helper below reproduces open-unlearning's inputs (src/data/utils.py
# preprocess_chat_instance / preprocess_pretraining_instance with the phi-1_5 plain
# template) and its model calls, one sequence at a time for teacher forcing (the
# reference batched 32/8 right-padded: that moves float32 losses by ~1e-6) and left-padded
# batches of open-unlearning's sizes for greedy generation.

TAGS = ("Question: ", "\n", "Answer: ", "\n\n")  # user start/end, assistant start/end


class OUReference:
    def __init__(self, name: str):
        torch = pytest.importorskip("torch")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(FIX / "tiny-llama" / name)
        self.model = AutoModelForCausalLM.from_pretrained(FIX / "tiny-llama" / name, dtype=torch.float32).eval()
        self.eos, self.pad = self.tok.eos_token_id, self.tok.pad_token_id

    def ids(self, text: str, max_length: int | None = None) -> list[int]:
        kw = {"max_length": max_length, "truncation": True} if max_length else {}
        return self.tok(text, add_special_tokens=True, **kw)["input_ids"]

    def qa(self, question: str, answer: str, fewshot=()) -> tuple[list[int], list[int]]:
        """(full ids, prompt ids): prompt and full text tokenized separately, eos appended."""
        us, ue, as_, ae = TAGS
        wrapped = "".join(us + q + ue + as_ + a + ae for q, a in fewshot) + us + question + ue + as_
        full, prompt = self.ids(wrapped + answer, 512), self.ids(wrapped, 512)
        return (full if full[-1] == self.eos else full + [self.eos]), prompt

    def completion(self, prefix: str, text: str, insert_space: bool = False) -> tuple[list[int], list[int]]:
        """(full ids, prefix ids); labels start at max(len(prefix ids), 1); no eos."""
        prefix_ids = self.ids(prefix)
        return self.ids(prefix + (" " if insert_space else "") + text)[: len(prefix_ids) + 2048], prefix_ids

    def stats(self, full: list[int], start: int) -> dict:
        """Per scored token: logprob, argmax, mu = sum p lp, var = sum p lp^2 - mu^2 (float32)."""
        start = max(start, 1)
        with self.torch.no_grad():
            x = self.torch.tensor([full])
            lsm = self.torch.log_softmax(self.model(input_ids=x).logits[0].float(), -1)[start - 1 : len(full) - 1]
        tgt = self.torch.tensor(full[start:])
        p = lsm.exp()
        mu = (p * lsm).sum(-1)
        var = (p * lsm.square()).sum(-1) - mu.square()
        return {"logprob": lsm.gather(1, tgt[:, None])[:, 0].numpy(), "argmax": lsm.argmax(-1).numpy(),
                "mu": mu.numpy(), "var": var.numpy(), "labels": np.asarray(full[start:]),
                "text": self.tok.decode(full[start:], skip_special_tokens=True)}

    def grad_norm(self, full: list[int], start: int) -> float:
        """gradnorm.py: train mode, loss = -mean logprob without the last scored token,
        mean over parameters of each gradient's 2-norm."""
        start = max(start, 1)
        self.model.train()
        x = self.torch.tensor([full])
        lsm = self.torch.log_softmax(self.model(input_ids=x).logits[0], -1)[start - 1 : len(full) - 2]
        loss = -lsm.gather(1, self.torch.tensor(full[start:-1])[:, None]).mean()
        self.model.zero_grad()
        loss.backward()
        norms = [p.grad.detach().norm(p=2) for p in self.model.parameters() if p.grad is not None]
        self.model.zero_grad()
        self.model.eval()
        return self.torch.stack(norms).mean().item()

    def generate(self, prompts: list[list[int]], max_new_tokens: int, batch_size: int) -> list[str]:
        """Greedy, left-padded with the tokenizer's pad, pad_token_id=eos, decoded as there."""
        out = []
        for i in range(0, len(prompts), batch_size):
            chunk = prompts[i : i + batch_size]
            width = max(map(len, chunk))
            x = self.torch.tensor([[self.pad] * (width - len(p)) + p for p in chunk])
            with self.torch.no_grad():
                g = self.model.generate(x, attention_mask=x.ne(self.pad), do_sample=False, max_new_tokens=max_new_tokens,
                                        use_cache=True, pad_token_id=self.eos)
            out += self.decode_many(g[:, width:])
        return out

    def decode_many(self, seqs) -> list[str]:
        return self.tok.batch_decode(seqs, skip_special_tokens=True, clean_up_tokenization_spaces=True)


def _generations(ref: OUReference, prompts, max_new_tokens, batch_size, stopwords=()):
    """(input text, cleaned generation) per prompt, as eval_text_similarity makes them."""
    eos_text = ref.tok.decode([ref.eos])
    gens = ref.generate(prompts, max_new_tokens, batch_size)
    return [(ref.decode_many([p])[0], G.clean_generation(g, eos_text, stopwords)) for p, g in zip(prompts, gens)]


def _rouge_block(ref, gens, label_ids, rouge_type, options=False):
    """Ground truth = decoded labels with the decoded prompt removed (str.replace), stripped."""
    items = []
    for (inp, gen), labels in zip(gens, label_ids):
        gts = [G.clean_ground_truth(ref.decode_many([ids])[0], inp) for ids in labels]
        items.append(G.rouge_options_item(inp, gts, gen) if options else G.rouge_item(inp, gts[0], gen))
    return G.rouge_block(items, rouge_type)


def _mia_blocks(ref, reference, forget, holdout, k=0.4):
    """The six attacks on (full ids, label start) sequences; the reference model is `retain`."""
    scores: dict = {}
    for side, seqs in (("forget", forget), ("holdout", holdout)):
        for full, start in seqs:
            s, r = ref.stats(full, start), reference.stats(full, start)
            item = {
                "mia_loss": P.mia_loss_score(s["logprob"]),
                "mia_zlib": P.mia_zlib_score(s["logprob"], s["text"]),
                "mia_min_k": P.mia_min_k_score(s["logprob"], k=k),
                "mia_min_k_plus_plus": P.mia_min_k_plus_plus_score(s["logprob"], s["mu"], s["var"], k=k),
                "mia_reference": P.mia_reference_score(s["logprob"], r["logprob"]),
                "mia_gradnorm": P.mia_gradnorm_score(ref.grad_norm(full, start)),
            }
            for name, value in item.items():
                scores.setdefault(name, {"forget": [], "holdout": []})[side].append(value)
    return {name: P.mia_block(v["forget"], v["holdout"]) for name, v in scores.items()}


def _memorization(stats):
    args = ([s["argmax"] for s in stats], [s["labels"] for s in stats])
    return {"extraction_strength": M.extraction_strength_block(*args), "exact_memorization": M.exact_memorization_block(*args)}


def _tofu(ref, reference, data, retain_out=None):
    r = {}
    for pre, split in (("forget", "forget"), ("retain", "retain"), ("ra", "real_authors"), ("wf", "world_facts")):
        keys = ("answer", "perturbed_answer") + (("paraphrased_answer",) if pre in ("forget", "retain") else ())
        # per key, per row, per option: (full ids, prompt ids)
        enc = {key: [[ref.qa(row["question"], a) for a in (row[key] if key == "perturbed_answer" else [row[key]])]
                     for row in data[split]] for key in keys}
        lps = {key: [[ref.stats(f, len(p))["logprob"] for f, p in opts] for opts in e] for key, e in enc.items()}
        r[f"{pre}_Q_A_Prob"] = L.probability_block([o[0] for o in lps["answer"]])
        r[f"{pre}_Q_A_PERT_Prob"] = L.probability_options_block(lps["perturbed_answer"])
        wrong = r[f"{pre}_Q_A_PERT_Prob"]["value_by_index"]
        if "paraphrased_answer" in lps:
            r[f"{pre}_Q_A_PARA_Prob"] = L.probability_block([o[0] for o in lps["paraphrased_answer"]])
            correct = r[f"{pre}_Q_A_PARA_Prob"]["value_by_index"]
        else:
            correct = r[f"{pre}_Q_A_Prob"]["value_by_index"]
            r[f"{pre}_Q_A_Prob_normalised"] = L.normalised_probability_block(correct, wrong)
        tr_name = "forget_truth_ratio" if pre == "forget" else f"{pre}_Truth_Ratio"
        r[tr_name] = TR.truth_ratio_block(correct, wrong, "closer_to_1_better" if pre == "forget" else "true_better")
        # one generation per question serves ROUGE, PARA_ROUGE and every PERT_ROUGE option
        gens = _generations(ref, [opts[0][1] for opts in enc["answer"]], 200, 32)
        labels = {key: [[f for f, _ in opts] for opts in e] for key, e in enc.items()}
        r[f"{pre}_Q_A_ROUGE"] = _rouge_block(ref, gens, labels["answer"], "rougeL_recall")
        if pre == "forget":
            r["forget_Q_A_PARA_ROUGE"] = _rouge_block(ref, gens, labels["paraphrased_answer"], "rougeL_recall")
            r["forget_Q_A_PERT_ROUGE"] = _rouge_block(ref, gens, labels["perturbed_answer"], "rougeL_recall", True)
            forget_seqs = [(f, len(p)) for f, p in (opts[0] for opts in enc["answer"])]
            r.update(_memorization([ref.stats(*seq) for seq in forget_seqs]))
    r["model_utility"] = U.model_utility({p: r[p] for p in U.MODEL_UTILITY_PARTS})
    holdout = [ref.qa(row["question"], row["answer"]) for row in data["holdout"]]
    r.update(_mia_blocks(ref, reference, forget_seqs, [(f, len(p)) for f, p in holdout]))
    retain_tr = retain_out["forget_truth_ratio"]["value_by_index"] if retain_out else None
    r["forget_quality"] = FQ.forget_quality(r["forget_truth_ratio"]["value_by_index"], retain_tr)
    r["privleak"] = PL.privleak(r["mia_min_k"]["agg_value"], retain_out["mia_min_k"]["agg_value"] if retain_out else None)
    return r


def _muse(ref, reference, data, retain_out=None):
    r = {}
    for side in ("forget", "retain"):
        icl = fewshot_pairs(data[f"knowmem_{side}_qa_icl"])
        enc = [ref.qa(row["question"], row["answer"], icl) for row in data[f"knowmem_{side}_qa"]]
        gens = _generations(ref, [p for _, p in enc], 32, 16, G.MUSE_STOPWORDS)
        r[f"{side}_knowmem_ROUGE"] = _rouge_block(ref, gens, [[f] for f, _ in enc], "rougeL_f1")
    enc = [ref.completion(row["prompt"], row["gt"], insert_space=True) for row in data["verbmem_forget"]]
    gens = _generations(ref, [p for _, p in enc], 128, 8)
    labels = [[f[max(len(p), 1):]] for f, p in enc]  # completion labels: the continuation only
    r["forget_verbmem_ROUGE"] = _rouge_block(ref, gens, labels, "rougeL_f1")
    r.update(_memorization([ref.stats(f, len(p)) for f, p in enc]))
    sides = [[(f, len(p)) for f, p in (ref.completion("", row["text"]) for row in data[f"privleak_{s}"])]
             for s in ("forget", "holdout")]
    r.update(_mia_blocks(ref, reference, *sides))
    r["privleak"] = PL.privleak(r["mia_min_k"]["agg_value"], retain_out["mia_min_k"]["agg_value"] if retain_out else None)
    return r


@pytest.fixture(scope="module")
def ours():
    tofu, muse = load_tofu(FIX / "tofu_tiny"), load_muse(FIX / "muse_tiny")
    refs = {m: OUReference(m) for m in ("retain", "target")}
    out = {"retain": {"TOFU": _tofu(refs["retain"], refs["retain"], tofu), "MUSE": _muse(refs["retain"], refs["retain"], muse)}}
    out["target"] = {"TOFU": _tofu(refs["target"], refs["retain"], tofu, out["retain"]["TOFU"]),
                     "MUSE": _muse(refs["target"], refs["retain"], muse, out["retain"]["MUSE"])}
    return out


CASES = [(m, b) for m in ("target", "retain") for b in ("TOFU", "MUSE")]


def _flat(x):
    return [float("nan") if v is None else v for v in (x if isinstance(x, list) else [x])]


@pytest.mark.slow
@pytest.mark.parametrize("model, bench", CASES)
def test_fidelity_aggregates(ours, model, bench):
    """Every agg_value open-unlearning logged: 1e-3 abs (ROUGE 1e-2); forget quality 1e-3 rel."""
    ref, got = ou_logs(model, bench), ours[model][bench]
    assert set(got) == set(ref)
    bad = []
    for name, block in ref.items():
        a, b = block["agg_value"], got[name]["agg_value"]
        if a is None or b is None:
            if a is not b:
                bad.append((name, a, b))
            continue
        tol = {"abs": 1e-2} if name.endswith("ROUGE") else {"rel": 1e-3} if name == "forget_quality" else {"abs": 1e-3}
        if b != pytest.approx(a, **tol):
            bad.append((name, a, b))
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.parametrize("model, bench", CASES)
def test_fidelity_per_item(ours, model, bench):
    """Per item: probabilities and truth ratios 1e-3 relative; ES/EM exact up to float32
    round-off; MIA scores 1e-3 relative or 1e-5 absolute (a memorized item's loss is ~1e-3,
    and float32 batch noise is ~4e-6 absolute on it)."""
    ref, got = ou_logs(model, bench), ours[model][bench]
    for name, block in ref.items():
        if name.startswith("mia_"):
            for side in ("forget", "holdout"):
                for key, item in block[side]["value_by_index"].items():
                    ours_score = got[name][side]["value_by_index"][key]["score"]
                    assert ours_score == pytest.approx(item["score"], rel=1e-3, abs=1e-5), (name, side, key)
            continue
        for key, item in (block.get("value_by_index") or {}).items():
            mine = got[name]["value_by_index"][key]
            if "prob" in item:
                assert _flat(mine["prob"]) == pytest.approx(_flat(item["prob"]), rel=1e-3), (name, key)
            elif "score" in item:
                tol = {"abs": 1e-6} if name in ("extraction_strength", "exact_memorization") else {"rel": 1e-3}
                assert _flat(mine["score"]) == pytest.approx(_flat(item["score"]), **tol), (name, key)


@pytest.mark.slow
@pytest.mark.parametrize("model, bench", CASES)
def test_fidelity_generations_and_ground_truths(ours, model, bench):
    """Inputs and ground truths are equal strings; greedy generations too, allowing a few
    flips: float32 logits differ by ~1e-6 between our unbatched-prompt setting and the
    reference's machine, which can flip a near-tied argmax (none flipped when this was written)."""
    ref, got = ou_logs(model, bench), ours[model][bench]
    for name in [n for n in ref if n.endswith("ROUGE")]:
        items = ref[name]["value_by_index"]
        same = 0
        for key, item in items.items():
            mine = got[name]["value_by_index"][key]
            assert mine["input"] == item["input"] and mine["ground_truth"] == item["ground_truth"], (name, key)
            same += mine["generation"] == item["generation"]
        assert same >= 0.9 * len(items), (name, same, len(items))
