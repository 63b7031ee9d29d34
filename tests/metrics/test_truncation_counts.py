"""Tokens cut by ``max_length`` reach the per-item blocks, summed over a row's options."""

from __future__ import annotations

import numpy as np

from evaldag.engine.adapters.toy import ToyEncoder
from evaldag.metrics.unlearning.scoring import note_truncation


def test_toy_completion_counts_the_cut() -> None:
    enc = ToyEncoder()
    full = enc.encode_completion("p", "abcdefghij", insert_space=False, max_length=4)
    whole = enc.encode_completion("p", "abcdefghij", insert_space=False, max_length=100)
    assert len(full.continuation_ids) == 4
    assert full.truncated == len(whole.continuation_ids) - 4
    assert whole.truncated == 0


def test_note_truncation_sums_options_and_skips_uncut_items() -> None:
    # row 0: one answer, 3 cut; row 1: two options, 0 and 5 cut; row 2: one answer, none cut
    scored = {"truncated": np.array([3, 0, 5, 0]), "n_options": np.array([0, 2, 0])}
    block = {"agg_value": 0.5, "value_by_index": {"0": {"prob": 0.1}, "1": {"prob": [0.2, 0.3]}, "2": {"prob": 0.4}}}
    out = note_truncation(block, scored)["value_by_index"]
    assert out == {"0": {"prob": 0.1, "truncated_tokens": 3}, "1": {"prob": [0.2, 0.3], "truncated_tokens": 5}, "2": {"prob": 0.4}}
    uncut = {"agg_value": 0.5, "value_by_index": {"0": {"prob": 0.1}}}
    assert note_truncation(uncut, {"truncated": np.array([0]), "n_options": np.array([0])}) == {"agg_value": 0.5, "value_by_index": {"0": {"prob": 0.1}}}


def test_carry_truncation_sums_parents_and_skips_uncut_items() -> None:
    from evaldag.metrics.unlearning.scoring import carry_truncation

    correct = {"0": {"prob": 0.1, "truncated_tokens": 4}, "1": {"prob": 0.2}, "2": {"prob": 0.3}}
    wrong = {"0": {"prob": [0.1]}, "1": {"prob": [0.2], "truncated_tokens": 2}, "2": {"prob": [0.3]}}
    vbi = {"0": {"score": 1.0}, "1": {"score": 2.0}, "2": {"score": 3.0}}
    assert carry_truncation(vbi, correct, wrong) == {"0": {"score": 1.0, "truncated_tokens": 4},
                                                     "1": {"score": 2.0, "truncated_tokens": 2}, "2": {"score": 3.0}}
