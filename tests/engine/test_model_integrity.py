"""Hostile models: weights replaced between fingerprint and load, an embedding
smaller than the tokenizer, NaN weights. Each is either refused with one line (exit 2,
nothing from the model stored) or flagged on every metric it reaches."""

import json
import shutil

import pytest

from evaldag.engine import cli
from evaldag.engine.adapters import integrity

from ..golden_runs import FIX, TINY

METRICS = "forget_Q_A_Prob,forget_quality"


def _argv(model, out, cache, metrics=METRICS):
    return ["run", "tofu", "--model", str(model), "--data", str(FIX / "tofu_tiny"), "--metrics", metrics,
            "--retain-model", str(TINY / "retain"), "--device", "cpu", "--dtype", "fp32",
            "--quiet", "--out", str(out), "--cache-dir", str(cache)]


def _eval(out):
    return json.loads((out / "TOFU_EVAL.json").read_text())


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------- 1. weights replaced under the run


def _swap_after_fingerprint(monkeypatch, folder):
    """A trainer saving into ``folder`` right after the run fingerprinted it (once)."""
    real = integrity.FolderSnapshot.take.__func__
    done = []

    def take(cls, root, files, sha256):
        snap = real(cls, root, files, sha256)
        if root == folder and not done:
            done.append(1)
            shutil.copyfile(TINY / "retain" / "model.safetensors", folder / "model.safetensors")
        return snap

    monkeypatch.setattr(integrity.FolderSnapshot, "take", classmethod(take))


def test_weights_replaced_after_fingerprinting_store_nothing_and_stop(tmp_path, monkeypatch, capsys):
    clean = _eval_clean(tmp_path, capsys)
    model = tmp_path / "model"
    shutil.copytree(TINY / "target", model)
    cache = tmp_path / "cache"
    _swap_after_fingerprint(monkeypatch, model)
    assert cli.main(_argv(model, tmp_path / "out1", cache)) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (f"evaldag: error: {model / 'model.safetensors'} changed while the run was using it "
                    "(rewritten: modification or change time moved); nothing from this model was stored")
    assert not (tmp_path / "out1").exists()
    monkeypatch.undo()
    shutil.copyfile(TINY / "target" / "model.safetensors", model / "model.safetensors")  # the untouched original
    assert cli.main(_argv(model, tmp_path / "out2", cache)) == 0
    got = _eval(tmp_path / "out2")
    assert got["forget_Q_A_Prob"]["agg_value"] == clean["forget_Q_A_Prob"]["agg_value"]
    assert got["forget_quality"]["agg_value"] == clean["forget_quality"]["agg_value"]
    run = json.loads((tmp_path / "out2" / "run.json").read_text())
    assert all(n["status"] == "computed" for k, n in run["nodes"].items() if "forget" in k and "retain" not in k)


def test_the_full_rehash_at_load_catches_a_change_that_stat_cannot_see(tmp_path, monkeypatch):
    """A filesystem with coarse timestamps: same size, same times, other bytes. Only the
    sha256 re-read when the weights are loaded notices it."""
    model = tmp_path / "model"
    shutil.copytree(TINY / "target", model)
    snap = integrity.FolderSnapshot.take(model, integrity.model_files(model), lambda p: _sha_of(p))
    frozen = {str(model / n): key for n, (key, _) in snap.files.items()}
    monkeypatch.setattr(integrity, "_stat", lambda p: frozen[str(p)])
    shutil.copyfile(TINY / "retain" / "model.safetensors", model / "model.safetensors")
    snap.check_stat(integrity.model_names(model))  # nothing visible to stat
    with pytest.raises(integrity.ModelChangedError) as e:
        snap.check_content(integrity.model_names(model))
    assert str(e.value) == (f"{model / 'model.safetensors'} changed while the run was using it (sha256 "
                            f"{_sha(TINY / 'retain')[:12]} where the fingerprint hashed {_sha(TINY / 'target')[:12]}); "
                            "nothing from this model was stored")
    (model / "model-00002-of-00002.safetensors").write_bytes(b"x")
    with pytest.raises(integrity.ModelChangedError, match="model-00002-of-00002.safetensors changed .*appeared"):
        snap.check_stat(integrity.model_names(model))


def _sha_of(path):
    from evaldag.engine.cache.filehash import hash_file

    return hash_file(path)


def _sha(folder):
    from evaldag.engine.cache.filehash import hash_file

    return hash_file(folder / "model.safetensors")


def _eval_clean(tmp_path, capsys):
    assert cli.main(_argv(TINY / "target", tmp_path / "clean", tmp_path / "clean-cache")) == 0
    capsys.readouterr()
    return _eval(tmp_path / "clean")


def test_a_file_written_after_loading_stops_before_the_next_batch_is_stored(tmp_path, monkeypatch, capsys):
    from evaldag.engine import executor as ex

    model = tmp_path / "model"
    shutil.copytree(TINY / "target", model)
    cache = tmp_path / "cache"
    real = ex.Executor._run
    calls = []

    def run(self, adapter, kind, batch):
        calls.append(kind)
        if len(calls) == 2:  # mid-run: the trainer rewrites the config
            (model / "config.json").write_text((model / "config.json").read_text())
        return real(self, adapter, kind, batch)

    monkeypatch.setattr(ex.Executor, "_run", run)
    assert cli.main(_argv(model, tmp_path / "out", cache, "forget_Q_A_Prob") + ["--batch-tokens", "64"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"evaldag: error: {model / 'config.json'} changed while the run was using it (rewritten")
    monkeypatch.undo()
    from evaldag.engine import Cache

    assert Cache(cache).requests.count() == 0  # the first batch, stored before the write, was taken back


def test_nodes_already_stored_from_a_model_that_then_changed_are_taken_back(tmp_path):
    """Stage 1 stores node ``first``; the config is rewritten; stage 2 (``second``, a child
    of ``first``) notices it. The run stops and neither node nor any answer stays."""
    from evaldag.engine import Cache, Result, Rows, TokenStats, metric, run
    from evaldag.engine.adapters.hf import HFModel

    model = tmp_path / "model"
    shutil.copytree(TINY / "target", model)

    @metric("hostile_first", version="1", needs=("model", "data"), register=False)
    def first(model, data):
        ids = model.encoder().encode(data[0]["t"])
        (res,) = yield [TokenStats(tuple(ids[:1]), tuple(ids[1:]))]
        (model_dir / "config.json").write_text((model_dir / "config.json").read_text())  # the trainer saves
        return Result(float(res.logprob.sum()))

    @metric("hostile_second", version="1", needs=("model", "data"), parents={"f": first}, register=False)
    def second(model, data, f):
        ids = model.encoder().encode(data[0]["t"] + " again")
        (res,) = yield [TokenStats(tuple(ids[:1]), tuple(ids[1:]))]
        return Result(f.agg_value + float(res.logprob.sum()))

    model_dir = model
    resources = {"model": HFModel(model, dtype="fp32", device="cpu"), "data": Rows(lambda: [{"t": "the cat sat"}])}
    cache = tmp_path / "cache"
    with pytest.raises(integrity.ModelChangedError, match="config.json changed while the run was using it"):
        run([second(name="s")], resources, cache_dir=cache)
    c = Cache(cache)
    assert list(c.nodes.entries()) == [] and c.requests.count() == 0


# ---------------------------------------------------------------- 9. embedding rows < tokenizer


def test_an_embedding_smaller_than_the_tokenizer_is_refused_before_any_forward(tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM

    model = tmp_path / "small-vocab"
    shutil.copytree(TINY / "target", model)
    m = AutoModelForCausalLM.from_pretrained(model)
    m.resize_token_embeddings(1000)  # the tokenizer keeps its 1024 tokens
    m.save_pretrained(model)
    assert json.loads((model / "config.json").read_text())["vocab_size"] == 1000
    assert cli.main(_argv(model, tmp_path / "out", tmp_path / "cache", "forget_Q_A_Prob")) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"evaldag: error: model {model}: config.json's vocab_size has 1000 rows but its tokenizer has 1024 tokens; "
        "token ids >= 1000 cannot be embedded (resize the embeddings to the tokenizer)")
    assert not (tmp_path / "out").exists()
    # config.json that claims the right size does not hide a small matrix: the loaded model is checked too
    from evaldag.engine.adapters.hf import _check_rows

    with pytest.raises(integrity.ModelRefused, match="the input embedding has 1000 rows but its tokenizer has 1024"):
        _check_rows(str(model), m, _Tok(1024))
    torch.manual_seed(0)


class _Tok:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


# ---------------------------------------------------------------- 16. NaN weights: every metric flagged

FLAGGED = "forget_Q_A_Prob,forget_truth_ratio,forget_quality,forget_Q_A_ROUGE,extraction_strength"


def _nan_copy(folder):
    from safetensors.torch import load_file, save_file

    shutil.copytree(TINY / "target", folder)
    sd = load_file(folder / "model.safetensors")
    sd["model.layers.0.mlp.down_proj.weight"][0, 0] = float("nan")  # one weight: every logit NaN
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})


def test_every_metric_downstream_of_nan_logits_carries_the_flag(tmp_path, capsys):
    from evaldag.engine.results import nonfinite_flag

    model = tmp_path / "nan"
    _nan_copy(model)
    flag = nonfinite_flag(str(model))
    argv = [a for a in _argv(model, tmp_path / "out", tmp_path / "cache", FLAGGED) if a != "--quiet"]
    assert cli.main(argv) == 0
    shown = capsys.readouterr().out
    for out in (tmp_path / "out", tmp_path / "warm"):
        ev = _eval(out)
        mine = {k: v for k, v in ev.items() if not k.endswith("@retain_model")}
        assert set(FLAGGED.split(",")) <= set(mine)
        assert {k for k, v in mine.items() if not (v.get("reason") or "").startswith(flag)} == set()
        assert ev["extraction_strength"]["reason"] == flag  # a number (0.097) that would otherwise pass unnoticed
        assert ev["forget_Q_A_ROUGE"]["reason"] == flag  # generations from NaN logits
        assert ev["forget_Q_A_ROUGE"]["agg_value"] == 0.0
        assert all("non-finite" not in (v.get("reason") or "") for k, v in ev.items() if k.endswith("@retain_model"))
        for name in FLAGGED.split(","):  # the terminal line names it too
            assert f"({flag}" in next(line for line in shown.splitlines() if line.strip().startswith(name + " "))
        if out.name == "out":  # the same, read back from the cache
            assert cli.main([*argv[:-4], "--out", str(tmp_path / "warm"), "--cache-dir", str(tmp_path / "cache")]) == 0
            shown = capsys.readouterr().out
            assert "nodes: 0 computed" in shown


def test_a_finite_model_carries_no_flag(tmp_path):
    assert cli.main(_argv(TINY / "target", tmp_path / "out", tmp_path / "cache", FLAGGED)) == 0
    assert all("non-finite" not in (v.get("reason") or "") for v in _eval(tmp_path / "out").values())


def test_generate_paths_note_non_finite_logits():
    """transformers' generate path watches the scores with a pass-through processor; the flag
    survives the request store (meta) and a finite result stays unflagged."""
    import numpy as np
    import torch

    from evaldag.engine.adapters.hf.hf_generation import _FiniteWatch
    from evaldag.engine.requests import GenerateResult, TokenStatsResult, nonfinite_output

    watch = _FiniteWatch()
    scores = torch.zeros(3, 5)
    scores[1, 2] = float("nan")
    scores[2, 0] = float("inf")
    assert watch(None, scores) is scores and watch.rows == {1, 2}
    r = GenerateResult(np.array([1, 2], dtype=np.int32), "ab", True)
    back = GenerateResult.from_arrays(r.to_arrays(), r.meta())
    assert back.nonfinite and nonfinite_output(back)
    assert not nonfinite_output(GenerateResult.from_arrays(r.to_arrays(), {"text": "ab"}))  # stored before the flag
    f = np.zeros(2, np.float32)
    assert not nonfinite_output(TokenStatsResult(f, np.zeros(2, np.int32), f, f))
    assert nonfinite_output(TokenStatsResult(np.array([0, np.nan], np.float32), np.zeros(2, np.int32), f, f))
