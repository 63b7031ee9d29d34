"""Edit success: efficacy, generalisation (paraphrases), specificity (neighbourhood), and lm-debugger's dataset score.

``efficacy`` follows ROME's CounterFact evaluation: a target's score on a prompt is its
mean per-token log-prob (``compare="mean_token"``, ROME's ``test_batch_prediction``
divides each target's NLL by its length) or its total log-prob (``"sequence"``). For
the rewrite prompt and the paraphrases an edit succeeds where P(new) > P(true); on the
neighbourhood prompts the old answer must survive, P(true) > P(new) (a neighbour may
carry its own true answer, see ``prompts.prompts_of``). Each edit scores
the share of its prompts that succeed; ``agg_value`` is the mean over edits (ROME's
``summarize``). Run it on ``model`` (edited) and bound to ``base_model`` to see the change.

``efficacy_dataset`` is lm-debugger's "Efficacy Score (Dataset)": ``pre_edit_argmax``
takes the unedited model's argmax next token after each prompt (its pre-intervention
hook), and on the edited model the score is the mean of
``1[logit(first token of target_new) > logit(that argmax token)]`` (strict). Logits and
log-probs of one distribution order the same, so log-probs are compared.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ...engine import Params, Result, TokenStats, metric
from .prompts import check_edit, encode, prompts_of, target_ids


class EfficacyParams(Params):
    prompts: Literal["rewrite", "paraphrase", "neighborhood"] = "rewrite"
    compare: Literal["mean_token", "sequence"] = "mean_token"


def _score(logprob: np.ndarray, compare: str) -> float:
    return float(np.mean(logprob)) if compare == "mean_token" else float(np.sum(logprob))


@metric("efficacy", version="1", params=EfficacyParams, needs=("model", "edits"),
        requests={"model": {"token_stats": ("logprob",)}})
def efficacy(model: Any, edits: list[dict], params: EfficacyParams):
    """Share of prompts where the edit holds: P(new) > P(true) (P(true) > P(new) on neighbourhood prompts)."""
    enc = model.encoder()
    reqs, where = [], []
    for i, row in enumerate(edits):
        check_edit(row, i)
        new = target_ids(enc, row["target_new"])
        for p, true in prompts_of(row, params.prompts):
            ctx = encode(enc, p)
            reqs += [TokenStats(ctx, new), TokenStats(ctx, target_ids(enc, true))]
            where.append(i)
    got = yield reqs
    per: dict[int, dict[str, list]] = {}
    for k, i in enumerate(where):
        s_new, s_true = _score(got[2 * k].logprob, params.compare), _score(got[2 * k + 1].logprob, params.compare)
        d = per.setdefault(i, {"new": [], "true": [], "ok": []})
        d["new"].append(s_new)
        d["true"].append(s_true)
        d["ok"].append(s_true > s_new if params.prompts == "neighborhood" else s_new > s_true)
    if not per:
        return Result.nan(f"no {params.prompts} prompts in the edit set")
    vbi = {str(i): {"score": float(np.mean(d["ok"])), "new": d["new"], "true": d["true"]} for i, d in sorted(per.items())}
    # ROME's magnitude: P(new) - P(true) with P = exp(score), averaged over every prompt
    diff = [np.exp(n) - np.exp(t) for d in per.values() for n, t in zip(d["new"], d["true"])]
    return Result(agg_value=float(np.mean([v["score"] for v in vbi.values()])), value_by_index=vbi,
                  extra={"prompts": params.prompts, "magnitude": float(np.mean(diff))})


def _first_token_requests(enc: Any, edits: list[dict], token_of: Any) -> list[TokenStats]:
    out = []
    for i, row in enumerate(edits):
        check_edit(row, i)
        out.append(TokenStats(encode(enc, row["prompt"]), (token_of(i, row),)))
    return out


@metric("pre_edit_argmax", version="1", needs=("base_model", "edits"), requests={"base_model": {"token_stats": ("argmax",)}})
def pre_edit_argmax(base_model: Any, edits: list[dict]):
    """The unedited model's argmax next token after each edit prompt (lm-debugger's pre-hook)."""
    enc = base_model.encoder()
    reqs = _first_token_requests(enc, edits, lambda i, row: target_ids(enc, row["target_new"])[0])
    got = yield [("base_model", r) for r in reqs]
    return [int(g.argmax[0]) for g in got]


@metric("efficacy_dataset", version="1", needs=("model", "edits"), parents={"true_tokens": "pre_edit_argmax"},
        requests={"model": {"token_stats": ("logprob",)}})
def efficacy_dataset(model: Any, edits: list[dict], true_tokens: list[int]):
    """lm-debugger's Efficacy Score (Dataset): edited logit of target_new's first token > of the unedited argmax."""
    enc = model.encoder()
    first = [target_ids(enc, row["target_new"])[0] for row in edits]
    got = yield (_first_token_requests(enc, edits, lambda i, row: first[i])
                 + _first_token_requests(enc, edits, lambda i, row: true_tokens[i]))
    new, true = got[: len(edits)], got[len(edits):]
    wins = {str(i): bool(float(n.logprob[0]) > float(t.logprob[0])) for i, (n, t) in enumerate(zip(new, true))}
    if not wins:
        return Result.nan("no edits")
    return Result(agg_value=float(np.mean(list(wins.values()))), value_by_index=wins,
                  extra={"target_first_tokens": first, "true_tokens": list(true_tokens)})
