"""rome_denominator / rome_key_ood: lm-debugger's DenominatorOfROMEUpdate and
OutOfDistributionKeys over one cached key covariance, checked by hand in float64 on the
trace model at block 2 after a ROME edit (and against make_edit's own divisor with a ridge)."""

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from evaldag.benchmarks.editing.rome_edit import _key, rome_update
from evaldag.engine import cli
from evaldag.engine.adapters.hf_encoder import HFEncoder
from evaldag.engine.requests import Generate, GenerationSettings
from evaldag.metrics.editing.prompts import encode, subject_range
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..asset_builders.editing import make_tracer

TRACER = make_tracer.TRACER
EDITS = json.loads((TRACER / "edits.json").read_text())
CORPUS_FILE = TRACER / "corpus.json"
CORPUS = [t["text"] for t in json.loads(CORPUS_FILE.read_text())]


def _run(tmp: Path, name: str, model: Path, *argv: str) -> dict:
    out = tmp / name
    assert cli.main(["run", "editing", "--quiet", "--model", str(model), "--base-model", str(TRACER), "--edits",
                     str(TRACER / "edits.json"), "--corpus", str(CORPUS_FILE), "--out", str(out),
                     "--cache-dir", str(tmp.parent / "cache"), *argv]) == 0
    return {"out": str(out), "eval": json.loads((out / "EDITING_EVAL.json").read_text()),
            "run": json.loads((out / "run.json").read_text()), "report": (out / "report.html").read_text()}


def _hand_keys(model, down, batches):
    """Every token's input to ``down``, float64: sequences of one length together, unpadded (the
    very keys of each sequence alone; rome_edit.py's key_covariance runs them one by one)."""
    rows = []
    h = down.register_forward_hook(lambda _m, inp, _o: rows.append(inp[0].detach().double()))
    try:
        with torch.no_grad():
            for same in batches:
                model(torch.tensor(same))
    finally:
        h.remove()
    return torch.cat([r.reshape(-1, r.shape[-1]) for r in rows])


@pytest.fixture(scope="module")
def by_hand(tmp_path_factory):
    """A ROME edit of block 2 (rome_edit.rome_update) saved as a checkpoint, and C over the corpus by hand.

    Editing block 2's down-projection cannot change its own inputs, so C (and every key) of
    the edited model is the one measured before the update, bit for bit."""
    tok = AutoTokenizer.from_pretrained(str(TRACER))
    model = AutoModelForCausalLM.from_pretrained(str(TRACER), dtype=torch.float32).eval()
    enc, down = HFEncoder(tok), model.model.layers[2].mlp.down_proj
    by_len = {}
    for t in CORPUS:
        ids = list(encode(enc, t))
        by_len.setdefault(len(ids), []).append(ids)
    keys = _hand_keys(model, down, list(by_len.values()))
    cov = keys.T @ keys / keys.shape[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        rome_update(model, down, enc, EDITS[0], cov, steps=5)
    out = tmp_path_factory.mktemp("rome") / "edited"
    model.save_pretrained(out)
    for f in TRACER.iterdir():
        if f.name.startswith("tokenizer"):
            shutil.copy2(f, out / f.name)
    return out, model, enc, down, torch.linalg.inv(cov), cov


@pytest.fixture(scope="module")
def edited(by_hand):
    return by_hand[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, edited):
    tmp = tmp_path_factory.mktemp("diag") / "runs"
    rome = _run(tmp, "rome", edited, "--metrics", "efficacy,rome_denominator,rome_key_ood")
    bare = _run(tmp, "bare", edited, "--metrics", "rome_denominator,rome_key_ood", "--context-templates", "none")
    return rome, bare


def _expected(inv, k, kbar):
    u = inv @ kbar
    u = u / torch.linalg.norm(u)
    return float(abs(k @ u)), float(u @ inv @ u)


def test_bare_prompt_values_equal_the_hand_computation(runs, by_hand):
    _, bare = runs
    _, model, enc, down, inv, _ = by_hand
    den, ood = bare["eval"]["rome_denominator"], bare["eval"]["rome_key_ood"]
    assert list(den["value_by_index"]) == [f"{i}/2" for i in range(len(EDITS))]  # manipulated layers: block 2
    for i, edit in enumerate(EDITS):
        k = _key(model, down, enc, edit["prompt"], edit["subject"])[2]
        d, o = _expected(inv, k, k)
        item = den["value_by_index"][f"{i}/2"]
        assert item["layer"] == 2 and item["subject"] == edit["subject"]
        assert item["value"] == pytest.approx(d, rel=1e-6)
        assert ood["value_by_index"][f"{i}/2"]["value"] == pytest.approx(o, rel=1e-6)
    assert den["agg_value"] == min(v["value"] for v in den["value_by_index"].values())
    assert ood["agg_value"] == max(v["value"] for v in ood["value_by_index"].values())
    assert den["covariance"] == "exact inverse of C" and den["context_templates"] == "none"


def test_context_templates_average_the_key_over_rome_prefixes(runs, by_hand):
    rome, _ = runs
    _, model, enc, down, inv, _ = by_hand
    den = rome["eval"]["rome_denominator"]
    prefixes = den["templates"]
    assert len(prefixes) == 21 and prefixes[0] == "" and all(p.endswith(". ") for p in prefixes[1:])
    assert len(set(prefixes)) > 10  # sampled, with a seed per prefix
    for i, edit in enumerate(EDITS[:2]):
        k = _key(model, down, enc, edit["prompt"], edit["subject"])[2]
        keys = []
        for p in prefixes:
            ids = list(enc.encode(p + edit["prompt"]))
            last = subject_range(enc, ids, edit["subject"], occurrence="last" if p else "first")[1] - 1
            keys.append(_key_at(model, down, ids, last))
        d, o = _expected(inv, k, torch.stack(keys).mean(0))
        assert den["value_by_index"][f"{i}/2"]["value"] == pytest.approx(d, rel=1e-6)
        assert rome["eval"]["rome_key_ood"]["value_by_index"][f"{i}/2"]["value"] == pytest.approx(o, rel=1e-6)


def _key_at(model, down, ids, pos):
    rows = []
    h = down.register_forward_hook(lambda _m, inp, _o: rows.append(inp[0][0, pos].detach().double()))
    with torch.no_grad():
        model(torch.tensor([ids]))
    h.remove()
    return rows[0]


def test_one_corpus_pass_serves_both_metrics(runs):
    rome, _ = runs
    ex = rome["run"]["executor"]["by_kind"]
    templates = 21 * len(EDITS)
    assert 0 < ex["down_proj_keys"]["sequences_forwarded"] <= len(CORPUS) + templates  # the corpus once, not once a metric
    assert ex["generate"]["sequences_forwarded"] == 20
    assert "ROME conditioning" in rome["report"] and "exact inverse of C" in rome["report"]
    vals = rome["eval"]["rome_denominator"]["value_by_index"]
    for key, item in vals.items():  # lm-debugger's warning on exactly the denominators below 1
        assert (f'<tr data-key="{key}" class="warn">' in rome["report"]) == (item["value"] < 1), key


def test_ridge_gives_the_divisor_of_make_edit(runs, edited, by_hand, capsys):
    """--cov-ridge 0.01 --context-templates none: make_edit --method rome's change is
    delta (C+rI)^-1 k / (k . (C+rI)^-1 k), i.e. ROME's delta u / (k . u) with u normalised."""
    tmp = Path(runs[0]["out"]).parent
    capsys.readouterr()
    got = _run(tmp, "ridge", edited, "--metrics", "rome_denominator", "--cov-ridge", "0.01",
               "--context-templates", "none")
    assert ("evaldag: note: ROME diagnostics on layer(s) 2 with the inverse of C + 0.01 I (--cov-ridge), "
            "context templates none") in capsys.readouterr().err
    _, model, enc, down, _, cov = by_hand
    den = got["eval"]["rome_denominator"]
    exact = runs[1]["eval"]["rome_denominator"]["value_by_index"]
    for i, edit in enumerate(EDITS):
        k = _key(model, down, enc, edit["prompt"], edit["subject"])[2]
        ck = torch.linalg.solve(cov + 0.01 * torch.eye(cov.shape[0], dtype=cov.dtype), k)  # rome_update's solve
        assert den["value_by_index"][f"{i}/2"]["value"] == pytest.approx(float(ck @ k) / float(ck.norm()), rel=1e-6)
        assert den["value_by_index"][f"{i}/2"]["value"] > exact[f"{i}/2"]["value"]  # the ridge hides small denominators
    assert den["covariance"] == "inverse of C + 0.01 I (--cov-ridge)"
    assert set(got["run"]["executor"]["by_kind"]) <= {"down_proj_keys"}
    assert got["run"]["executor"]["by_kind"].get("down_proj_keys", {}).get("sequences_forwarded", 0) == 0  # keys cached


def test_top_k_sampling_and_old_generation_keys():
    from evaldag.engine.adapters.generation_control import draw, row_generator

    s = GenerationSettings(do_sample=True, seed=3, top_k=1)
    scores = torch.tensor([0.1, 2.0, 0.3, 1.9])
    assert all(int(draw(scores, s, row_generator(s, "cpu"))) == 1 for _ in range(5))
    s2 = GenerationSettings(do_sample=True, seed=3, top_k=2)
    gen = row_generator(s2, "cpu")
    assert {int(draw(scores, s2, gen)) for _ in range(50)} == {1, 3}
    # top_k at its default leaves every generation key what it was before the field existed
    req = Generate((1, 2, 3), GenerationSettings(max_new_tokens=7))
    old = {"kind": "generate", "schema": "1", "prompt_ids": [1, 2, 3],
           "settings": {"max_new_tokens": 7, "do_sample": False, "temperature": 1.0, "top_p": 1.0, "seed": None,
                        "stop_strings": []}}
    assert req.key() == hashlib.sha256(json.dumps(old, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert Generate((1, 2, 3), GenerationSettings(max_new_tokens=7, top_k=5)).key() != req.key()


def evaldag(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main([str(x) for x in argv])
    return code, capsys.readouterr().err


def _one_line(done, *words):
    code, err = done
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evaldag: error: ") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_bad_input(tmp_path, capsys):
    base = ["run", "editing", "--model", TRACER, "--base-model", TRACER, "--edits", TRACER / "edits.json",
            "--out", tmp_path / "out", "--cache-dir", tmp_path / "c"]
    _one_line(evaldag(capsys, *base, "--metrics", "rome_denominator", "--rome-layers", "2"), "rome_denominator needs --corpus FILE")
    _one_line(evaldag(capsys, *base, "--metrics", "rome_key_ood", "--rome-layers", "2", "--corpus", tmp_path / "none.json"),
              f"--corpus {tmp_path / 'none.json'}: no such file")
    _one_line(evaldag(capsys, *base, "--metrics", "rome_denominator", "--rome-layers", "1", "--corpus", CORPUS_FILE),
              "layer 1's down-projection (model.layers.1.mlp.down_proj.weight) is all zeros")
    _one_line(evaldag(capsys, *base, "--metrics", "rome_denominator", "--corpus", CORPUS_FILE), "give --rome-layers")
    few = tmp_path / "few.json"
    few.write_text(json.dumps([{"text": t} for t in CORPUS[:3]]))
    _one_line(evaldag(capsys, *base, "--metrics", "rome_denominator", "--rome-layers", "2", "--corpus", few),
              "39 tokens, fewer than the 256 keys of layer 2's down-projection", "rank at most 39", "--cov-ridge")
    assert not (tmp_path / "out").exists()
    # without --corpus, `all` leaves them out and the run goes on
    from evaldag.benchmarks.editing.benchmark import EditingBenchmark

    assert "rome_denominator" not in EditingBenchmark().metrics_from_args(argparse.Namespace(metrics="all", corpus=None))
    assert "rome_key_ood" in EditingBenchmark().metrics_from_args(argparse.Namespace(metrics="all", corpus="x"))


def test_a_singular_covariance_fails_its_node_in_one_line(tmp_path, capsys):
    """Enough tokens, too few distinct keys (one text repeated): only the corpus pass can tell.
    The covariance node fails with one line naming its rank and --cov-ridge, no traceback."""
    same = tmp_path / "same.json"
    same.write_text(json.dumps([{"text": CORPUS[0]}] * 40))
    capsys.readouterr()
    code = cli.main([str(x) for x in ("run", "editing", "--model", TRACER, "--base-model", TRACER, "--edits",
                                      TRACER / "edits.json", "--metrics", "rome_denominator", "--rome-layers", "2",
                                      "--corpus", same, "--out", tmp_path / "out", "--cache-dir", tmp_path / "c")])
    got = capsys.readouterr()
    err = got.out + got.err
    assert code == 1, err
    failed = [line for line in err.splitlines() if line.startswith("FAILED rome_key_covariance")]
    assert len(failed) == 1 and "cannot be inverted exactly; give --cov-ridge R" in failed[0] and "has rank" in failed[0]
    assert "Traceback" not in err


# docs/gotchas.md "Numbers that move with the machine": the keys are a float32 forward, as
# lm-debugger's are, and C's condition number (~3e7) amplifies their last bits
THREADS_RTOL = 1e-5


def _values(run: dict) -> dict:
    return {m: {k: v["value"] for k, v in run["eval"][m]["value_by_index"].items()} for m in ("rome_denominator", "rome_key_ood")}


def test_key_ood_at_one_and_two_torch_threads(runs, by_hand, tmp_path):
    """At 1 and 2 torch threads each value equals the float64 hand computation over that thread
    count's own keys, and the two runs agree within the tolerance docs/gotchas.md states. The
    module's bare run is the one at this process's thread count (1 under the test command)."""
    _, model, enc, down, inv, _ = by_hand
    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    got = {before: _values(runs[1])}
    try:
        torch.set_num_threads(other)
        got[other] = _values(_run(tmp_path / "threads" / "runs", "bare", by_hand[0], "--metrics", "rome_denominator,rome_key_ood",
                                  "--context-templates", "none"))  # a cache of its own: computed at `other` threads
        for n in (other, before):
            torch.set_num_threads(n)
            for i, edit in enumerate(EDITS):
                k = _key(model, down, enc, edit["prompt"], edit["subject"])[2]
                d, o = _expected(inv, k, k)
                assert got[n]["rome_denominator"][f"{i}/2"] == pytest.approx(d, rel=1e-6), (n, i)
                assert got[n]["rome_key_ood"][f"{i}/2"] == pytest.approx(o, rel=1e-6), (n, i)
    finally:
        torch.set_num_threads(before)
    assert {1, 2} <= set(got)
    for m in got[1]:
        assert list(got[2][m]) == list(got[1][m]) == [f"{i}/2" for i in range(len(EDITS))]
        for key, one in got[1][m].items():
            assert got[2][m][key] == pytest.approx(one, rel=THREADS_RTOL), (m, key)
