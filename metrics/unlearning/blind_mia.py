"""``mia_blind_baseline``: the AUC a model-free classifier gets on an MIA's own member/non-member split.

A membership-inference AUC means something only if the model is what separates the two
sides. When members and non-members differ in distribution (length, topic, wording), a
classifier that never sees the model separates them too: Das et al. 2024 ("Blind
Baselines Beat Membership Inference Attacks for Foundation Models") and Duan et al. 2024
("Do Membership Inference Attacks Work on Large Language Models?") found such blind
classifiers matching published MIA AUCs. This node computes that baseline on the very
rows the MIAs score (the same resources, the same ``--limit``), and says which MIA does
not beat it.

The classifier: bag of words (unigrams and bigrams, counts) plus the text's length in
characters and words, a logistic regression (scikit-learn, ``evaldag[sklearn]``) scored
out of fold by stratified k-fold cross-validation, shuffled with ``seed``: each row's
probability of being a non-member comes from a model fitted without it. The AUC is
oriented as open-unlearning's MIA AUCs: non-members (holdout) are the positive class,
so both read "how well the sides separate" the same way, 0.5 being chance.

An MIA *beats* its baseline (:func:`beats`) when its AUC, in that fixed orientation, is
strictly greater than the baseline's and than 0.5. Strictly: a tie is not evidence that
the model adds anything to what the text alone gives away. Above 0.5: an AUC below chance
means the attack scores members as *less* member-like than non-members -- the direction is
not membership's (after unlearning it is the over-unlearning that privleak measures), and
flipping it to 1 - AUC would choose the direction from the data, which the meta-evaluation
forbids as well (its faithfulness direction is fixed in advance). So a below-chance
baseline (a cross-validated classifier can land there by chance on small splits) does not
let a below-chance attack "beat" it.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ...engine import Params, Result, metric

SKLEARN_EXTRA = "pip install 'evaldag[sklearn]'"


class BlindParams(Params):
    text_key: str = "answer"  # the scored text of a row (TOFU: answer; MUSE's privleak rows: text)
    features: Literal["bow+length", "bow", "length"] = "bow+length"
    folds: int = 5
    seed: int = 0


def sklearn_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("sklearn") is None


def beats(mia_auc: float | None, blind_auc: float) -> bool:
    """Whether an MIA of AUC ``mia_auc`` beats a blind baseline of AUC ``blind_auc`` (both oriented
    non-members positive): strictly above the baseline and above chance; a missing AUC never does."""
    if mia_auc is None or np.isnan(mia_auc):
        return False
    return bool(mia_auc > blind_auc and mia_auc > 0.5)


def _texts(rows: list[dict], key: str, side: str) -> list[str]:
    out = []
    for i, row in enumerate(rows):
        if key not in row:
            raise KeyError(f"{side} row {i}: no field {key!r}")
        out.append(str(row[key]))
    return out


def blind_scores(members: list[str], nonmembers: list[str], features: str = "bow+length", folds: int = 5,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Out-of-fold P(non-member) for every text (members first) and the labels; the folds used."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    texts = list(members) + list(nonmembers)
    labels = np.asarray([0] * len(members) + [1] * len(nonmembers))
    k = min(folds, len(members), len(nonmembers))
    if k < 2:
        raise ValueError(f"the blind baseline needs at least 2 rows on each side, got {len(members)} members "
                         f"and {len(nonmembers)} non-members")
    lengths = np.asarray([[len(t), len(t.split())] for t in texts], dtype=np.float64)
    scores = np.zeros(len(texts))
    for train, test in StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(texts, labels):
        parts_train, parts_test = [], []
        if "bow" in features:
            vec = CountVectorizer(ngram_range=(1, 2))
            parts_train.append(vec.fit_transform([texts[i] for i in train]))
            parts_test.append(vec.transform([texts[i] for i in test]))
        if "length" in features:  # standardised on the training fold only
            mu, sd = lengths[train].mean(0), lengths[train].std(0)
            sd[sd == 0] = 1.0
            parts_train.append(csr_matrix((lengths[train] - mu) / sd))
            parts_test.append(csr_matrix((lengths[test] - mu) / sd))
        clf = LogisticRegression(max_iter=1000, random_state=seed)
        clf.fit(hstack(parts_train).tocsr(), labels[train])
        scores[test] = clf.predict_proba(hstack(parts_test).tocsr())[:, 1]
    return scores, labels, k


@metric("mia_blind_baseline", version="2", params=BlindParams, needs=("members", "nonmembers"))
def mia_blind_baseline(members: list[dict], nonmembers: list[dict], params: BlindParams, **mias: Result) -> Result:
    """The blind classifier's AUC; each MIA parent's AUC beside it and whether it beats it."""
    if sklearn_missing():
        raise RuntimeError(f"mia_blind_baseline needs scikit-learn: {SKLEARN_EXTRA}")
    from sklearn.metrics import roc_auc_score

    scores, labels, k = blind_scores(_texts(members, params.text_key, "member"), _texts(nonmembers, params.text_key, "non-member"),
                                     params.features, params.folds, params.seed)
    value = float(roc_auc_score(labels, scores))
    aucs = {name: r.agg_value for name, r in sorted(mias.items())}
    beaten = [n for n, a in aucs.items() if beats(a, value)]
    extra = {"features": params.features, "folds": k, "seed": params.seed, "members": int((labels == 0).sum()),
             "nonmembers": int((labels == 1).sum())}
    if aucs:
        losing = [n for n in aucs if n not in beaten]
        extra |= {"mia_auc": aucs, "beaten_by": beaten, "not_beaten_by": losing}
        if losing:  # the SUMMARY's notes (engine/outputs/files.py) carry it beside the numbers
            extra["summary_note"] = (f"{', '.join(f'{n} (AUC {aucs[n]:.4g})' for n in losing)} "
                                     f"{'does' if len(losing) == 1 else 'do'} not beat the blind baseline (AUC {value:.4g})")
    return Result(agg_value=value, extra=extra)
