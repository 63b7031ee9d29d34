"""``--attack relearn``: a derived model trained once, stored in the cache, evaluated as a checkpoint.

On the tiny fixtures (40 forget rows: 3 optimizer steps; the disjoint half, 20 rows: 2 steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaldag.engine import relearn, relearn_transform
from evaldag.engine.cache import Cache
from tests.inprocess import run_cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TARGET, RETAIN, DATA = FIX / "tiny-llama" / "target", FIX / "tiny-llama" / "retain", FIX / "tofu_tiny"
METRICS = "forget_Q_A_Prob,forget_truth_ratio,forget_quality"


def _run(tmp_path, out, *extra, metrics=METRICS):
    return run_cli(["run", "tofu", "--model", TARGET, "--retain-model", RETAIN, "--data", DATA, "--metrics", metrics,
                    "--cache-dir", tmp_path / "cache", "--out", tmp_path / out, "--no-progress", *extra])


def _summary(folder):
    return json.loads((folder / "TOFU_SUMMARY.json").read_text())


@pytest.fixture
def loads(monkeypatch):
    """Every time transformers reads a causal LM's weights."""
    import transformers

    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, *a, **kw):
        seen.append(str(a[0]) if a else "")
        return real(cls, *a, **kw)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    return seen


def test_relearn_trains_once_stores_and_a_warm_rerun_trains_and_loads_nothing(tmp_path, loads):
    trained = len(relearn.TRAINER_RUNS)
    cold = _run(tmp_path, "out", "--attack", "relearn")
    assert cold.returncode == 0, cold.stderr
    assert len(relearn.TRAINER_RUNS) == trained + 2  # the model and the retain model (the control)
    assert cold.stderr.count("40 rows of tofu_forget, 3 steps (1 epoch(s), batch 4 x accumulation 4, lr 2e-05, full)") == 2
    attacked = tmp_path / "out" / "attacks" / "relearn"
    run = json.loads((attacked / "run.json").read_text())
    derived = run["provenance"]["resources"]["model"]["derived"]
    assert derived["transform"]["steps"] == 3 and derived["transform"]["rows"] == 40
    assert derived["transform"]["params"]["lr"] == 2e-5 and derived["transform"]["params"]["recipe"] == "openunlearning-meta-eval"
    plain, after = _summary(tmp_path / "out"), _summary(attacked)
    assert after["forget_Q_A_Prob"] > plain["forget_Q_A_Prob"]  # it learned the forget rows

    store = Cache(tmp_path / "cache", inspect=True).weights
    stored = [store.manifest(d.name) for d in store.entries()]
    assert sorted(m["steps"] for m in stored) == [3, 3] and all("model.safetensors" in m["files"] for m in stored)

    # the stored folder is a checkpoint: a plain run on it gives the attacked run's numbers exactly
    key = next(d for d in store.entries() if store.manifest(d.name)["parent"] == derived["parent"])
    direct = run_cli(["run", "tofu", "--model", key, "--data", DATA, "--metrics", "forget_Q_A_Prob,forget_truth_ratio",
                      "--cache-dir", tmp_path / "cache2", "--out", tmp_path / "direct", "--no-progress"])
    assert direct.returncode == 0, direct.stderr
    d = _summary(tmp_path / "direct")
    assert (d["forget_Q_A_Prob"], d["forget_truth_ratio"]) == (after["forget_Q_A_Prob"], after["forget_truth_ratio"])

    loads.clear()
    trained, stored_loads = len(relearn.TRAINER_RUNS), len(relearn_transform.STORED_LOADS)
    warm = _run(tmp_path, "out", "--attack", "relearn")
    assert warm.returncode == 0, warm.stderr
    assert (len(relearn.TRAINER_RUNS), len(relearn_transform.STORED_LOADS), loads) == (trained, stored_loads, [])
    assert _summary(attacked) == after

    # new answers needed (another metric): the stored weights load, nothing trains
    more = _run(tmp_path, "out", "--attack", "relearn", metrics=METRICS + ",retain_Q_A_Prob")
    assert more.returncode == 0, more.stderr
    # the model, and the retain model in its own run (OUT/control/attacks/relearn/: retain_Q_A_Prob is new there);
    # as the unlearned run's reference the retain model serves no new request
    assert len(relearn.TRAINER_RUNS) == trained and len(relearn_transform.STORED_LOADS) == stored_loads + 2
    assert _summary(attacked)["forget_Q_A_Prob"] == after["forget_Q_A_Prob"]

    ls = run_cli(["cache", "ls", "--cache-dir", tmp_path / "cache"]).stdout
    assert ls.count("relearn (3 steps) [weights]") == 2


def test_disjoint_trains_on_one_half_and_scores_the_other(tmp_path):
    r = _run(tmp_path, "out", "--attack", "relearn:disjoint=true,lr=1e-3", metrics="forget_Q_A_Prob")
    assert r.returncode == 0, r.stderr
    assert "20 rows of tofu_forget, 2 steps" in r.stderr
    folder = tmp_path / "out" / "attacks" / "relearn_disjoint=true,lr=1e-3"
    ev = json.loads((folder / "TOFU_EVAL.json").read_text())
    assert len(ev["forget_Q_A_Prob"]["value_by_index"]) == 20  # the half it did not train on
    t = json.loads((folder / "run.json").read_text())["provenance"]["resources"]["model"]["derived"]["transform"]
    assert (t["rows"], t["scored_rows"], t["steps"]) == (20, 20, 2)
    plain = json.loads((tmp_path / "out" / "TOFU_EVAL.json").read_text())
    assert len(plain["forget_Q_A_Prob"]["value_by_index"]) == 40


def test_a_split_the_run_does_not_have_is_named(tmp_path):
    r = _run(tmp_path, "out", "--attack", "relearn:split=forgett")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("evaldag: error: --attack relearn:split=forgett: this run has no data split 'forgett'; "
                                "did you mean forget?"), r.stderr
    assert not (tmp_path / "out").exists()
    r = _run(tmp_path, "out", "--attack", "relearn:lrr=1")
    assert r.returncode == 2 and "relearn has no parameter 'lrr'; did you mean lr?" in r.stderr


def test_lora_relearn_stores_only_its_adapter(tmp_path):
    spec = "relearn:mode=lora,lr=1e-3"
    cold = run_cli(["run", "tofu", "--model", TARGET, "--data", DATA, "--metrics", "forget_Q_A_Prob", "--attack", spec,
                    "--cache-dir", tmp_path / "cache", "--out", tmp_path / "out", "--no-progress"])
    assert cold.returncode == 0, cold.stderr
    store = Cache(tmp_path / "cache", inspect=True).weights
    (folder,) = list(store.entries())
    assert sorted(store.manifest(folder.name)["files"]) == ["adapter_config.json", "adapter_model.safetensors"]
    assert store.manifest(folder.name)["steps"] == 3
    attacked = _summary(tmp_path / "out" / "attacks" / "relearn_mode=lora,lr=1e-3")
    assert attacked["forget_Q_A_Prob"] != _summary(tmp_path / "out")["forget_Q_A_Prob"]
    # another cache for the answers, the same weights store: the adapter loads over the parent, nothing trains
    import shutil

    shutil.rmtree(tmp_path / "cache" / "objects")
    shutil.rmtree(tmp_path / "cache" / "requests")
    shutil.rmtree(tmp_path / "cache" / "index", ignore_errors=True)
    trained, stored = len(relearn.TRAINER_RUNS), len(relearn_transform.STORED_LOADS)
    again = run_cli(["run", "tofu", "--model", TARGET, "--data", DATA, "--metrics", "forget_Q_A_Prob", "--attack", spec,
                     "--cache-dir", tmp_path / "cache", "--out", tmp_path / "out2", "--no-progress"])
    assert again.returncode == 0, again.stderr
    assert (len(relearn.TRAINER_RUNS), len(relearn_transform.STORED_LOADS)) == (trained, stored + 1)
    assert _summary(tmp_path / "out2" / "attacks" / "relearn_mode=lora,lr=1e-3") == attacked


def test_weights_stored_in_a_read_from_layer_load_from_there_and_nothing_is_written_to_it(tmp_path):
    spec, folder = "relearn", "attacks/relearn"
    a, b = tmp_path / "a", tmp_path / "b"
    args = ["run", "tofu", "--model", TARGET, "--data", DATA, "--metrics", "forget_Q_A_Prob", "--attack", spec, "--no-progress"]
    cold = run_cli([*args, "--cache-dir", a, "--out", tmp_path / "out"])
    assert cold.returncode == 0, cold.stderr
    (key,) = [d.name for d in Cache(a, inspect=True).weights.entries()]
    import shutil

    for sub in ("objects", "requests", "index"):  # A keeps only the trained weights: B's run needs the model
        shutil.rmtree(a / sub, ignore_errors=True)
    manifest = Cache(a, inspect=True).weights.path(key) / "manifest.json"
    used = manifest.stat().st_mtime_ns
    trained, stored = len(relearn.TRAINER_RUNS), len(relearn_transform.STORED_LOADS)
    warm = run_cli([*args, "--cache-dir", b, "--cache-read-from", a, "--out", tmp_path / "out2"])
    assert warm.returncode == 0, warm.stderr
    assert (len(relearn.TRAINER_RUNS), relearn_transform.STORED_LOADS[stored:]) == (trained, [key])  # loaded from A, not trained
    assert _summary(tmp_path / "out2" / folder) == _summary(tmp_path / "out" / folder)
    assert list(Cache(b, inspect=True).weights.entries()) == []  # read through, not copied
    assert manifest.stat().st_mtime_ns == used  # the read-only layer is not touched

    # a damaged file in the read-only layer is found by its checksum before any weight is read: said, trained again here
    data = bytearray((manifest.parent / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (manifest.parent / "model.safetensors").write_bytes(bytes(data))
    shutil.rmtree(b)
    again = run_cli([*args, "--cache-dir", b, "--cache-read-from", a, "--out", tmp_path / "out3"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"evaldag: warning: {manifest.parent / 'model.safetensors'}: its sha256 is not the manifest's; " \
           "the relearn trains again" in again.stderr
    assert len(relearn.TRAINER_RUNS) == trained + 1 and [d.name for d in Cache(b, inspect=True).weights.entries()] == [key]
    assert _summary(tmp_path / "out3" / folder)["forget_Q_A_Prob"] == pytest.approx(
        _summary(tmp_path / "out" / folder)["forget_Q_A_Prob"], abs=1e-6)


MUSE = FIX / "muse_tiny"


def _muse(tmp_path, *extra):
    return run_cli(["run", "muse", "--model", TARGET, "--data", MUSE, "--metrics", "mia_loss", "--cache-dir", tmp_path / "cache",
                    "--out", tmp_path / "out", "--no-progress", *extra])


def test_muse_relearns_on_its_forget_corpus_by_default(tmp_path):
    r = _muse(tmp_path, "--attack", "relearn")
    assert r.returncode == 0, r.stderr
    assert "20 rows of muse_privleak_forget, 2 steps (1 epoch(s), batch 4 x accumulation 4, lr 2e-05, full)" in r.stderr
    t = json.loads((tmp_path / "out" / "attacks" / "relearn" / "run.json").read_text())
    t = t["provenance"]["resources"]["model"]["derived"]["transform"]
    assert (t["params"]["split"], t["rows"], t["steps"]) == ("forget", 20, 2)


def test_a_muse_split_it_does_not_have_lists_muses_splits(tmp_path):
    r = _muse(tmp_path, "--attack", "relearn:split=forgett")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "evaldag: error: --attack relearn:split=forgett: this run has no data split 'forgett'; did you mean forget? "
        "(its splits: forget (privleak_forget, the default), knowmem_forget_qa, knowmem_retain_qa, privleak_forget, "
        "privleak_holdout, verbmem_forget; or give a .json/.jsonl file)"), r.stderr
    assert not (tmp_path / "out").exists()
