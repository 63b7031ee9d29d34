"""Output folders in hostile hands: --out over an input, sets torn by a signal, another run's files, secrets.

Each case sets up the hostile folder the issue describes, runs the real CLI and checks
the bytes left on disk and the one line printed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaldag.engine import cli
from evaldag.engine.outputs import files as out_files
from evaldag.engine.outputs import sets
from evaldag.engine.redact import redact_argv, redact_text

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TINY = FIX / "tiny-llama"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))
RUN_A = ["run", "toy", "--add-metric", "toy_min_k"]  # TOY_* and RUN_* files
RUN_B = ["run", "toy", "--metrics", "toy_probability"]  # TOY_* only, one metric


def _toy(out: Path, cache: Path, words=RUN_A) -> int:
    return cli.main([*words, "--quiet", "--out", str(out), "--cache-dir", str(cache)])


def view(out: Path) -> dict[str, bytes]:
    """What a user sees in OUT: each visible name that reads as a file, with its bytes."""
    seen = {}
    for p in sorted(out.iterdir()):
        if not p.name.startswith(".") and p.is_file():
            seen[p.name] = p.read_bytes()
    return seen


def _one_run(v: dict[str, bytes]) -> str:
    """Which of RUN_A / RUN_B a visible set is, checking every file agrees with run.json."""
    cmd = json.loads(v["run.json"])["provenance"]["command"]
    summary = json.loads(v["TOY_SUMMARY.json"])
    if "--add-metric" in cmd:
        assert "RUN_EVAL.json" in v and "RUN_SUMMARY.json" in v and len(summary) == 4, sorted(v)
        return "A"
    assert "RUN_EVAL.json" not in v and "RUN_SUMMARY.json" not in v and list(summary) == ["toy_probability"], sorted(v)
    return "B"


# ---------------------------------------------------------------- item 2: --out over an input
def _retain_logs(folder: Path) -> dict[str, bytes]:
    folder.mkdir(parents=True)
    for kind in ("EVAL", "SUMMARY"):
        shutil.copy(FIX / "open_unlearning" / f"retain_TOFU_{kind}.json", folder / f"TOFU_{kind}.json")
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("where", ["same", "parent"])
def test_out_that_is_or_holds_the_retain_logs_is_refused_and_they_stay(tmp_path, capsys, where):
    logs = tmp_path / "retain"
    before = _retain_logs(logs)
    out = logs if where == "same" else tmp_path
    code = cli.main(["run", "tofu", "--model", str(TINY / "target"), "--data", str(FIX / "tofu_tiny"),
                     "--retain-logs", str(logs), "--out", str(out), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0] == (f"evaldag: error: --out {out} holds the input --retain-logs {logs / 'TOFU_EVAL.json'}; "
                      "choose another --out (nothing was written)")
    assert {p.name: p.read_bytes() for p in logs.iterdir()} == before
    assert not (out / ".evaldag").exists() and not (tmp_path / "c").exists()


def test_out_inside_the_model_folder_is_refused(tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(TINY / "target", model)
    out = model / "evaldag-out"
    code = cli.main(["run", "tofu", "--model", str(model), "--data", str(FIX / "tofu_tiny"), "--retain-model",
                     str(TINY / "retain"), "--out", str(out), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"evaldag: error: --out {out} lies inside the input --model {model}; "
                                 "choose another --out (nothing was written)"]
    assert not out.exists()


def test_an_open_unlearning_eval_file_in_out_is_not_replaced(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    theirs = (FIX / "open_unlearning" / "target_TOFU_EVAL.json").read_bytes()
    (out / "TOY_EVAL.json").write_bytes(theirs)  # no run.json of evaldag beside it
    assert _toy(out, tmp_path / "c") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"evaldag: error: --out {out}: {out / 'TOY_EVAL.json'} is not an output of an evaldag run; "
                   "refusing to replace it (choose another --out)"]
    assert (out / "TOY_EVAL.json").read_bytes() == theirs and sorted(p.name for p in out.iterdir()) == ["TOY_EVAL.json"]


@pytest.mark.parametrize("name", ["TOY_EVAL.json", "run.json", "notes.html"])
def test_report_out_replaces_only_a_report(tmp_path, capsys, name):
    out = tmp_path / "out"
    assert _toy(out, tmp_path / "c") == 0
    dest = out / name if name != "notes.html" else tmp_path / name
    if name == "notes.html":
        dest.write_text("<html>my notes</html>")
    before = dest.read_bytes()
    assert cli.main(["report", str(out), "--out", str(dest)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"evaldag: error: {dest}: not a report evaldag wrote; refusing to replace it (choose another --out)"]
    assert dest.read_bytes() == before
    assert cli.main(["graph", "--run", str(out), "--format", "mermaid"]) == 0  # the run still reads


@pytest.mark.parametrize("name", ["run.json", "TOY_EVAL.json", "report.html"])
def test_a_drawing_never_replaces_a_run_file(tmp_path, capsys, name):
    out = tmp_path / "out"
    assert _toy(out, tmp_path / "c") == 0
    before = (out / name).read_bytes()
    assert cli.main(["graph", "--run", str(out), "--format", "svg", "--out", str(out / name)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"evaldag: error: --out {out / name}: a run's output file, not a drawing; refusing to replace it"]
    assert (out / name).read_bytes() == before


def test_report_rewritten_in_out_stays_inside_the_set(tmp_path, capsys):
    out = tmp_path / "out"
    assert _toy(out, tmp_path / "c") == 0
    assert cli.main(["report", str(out), "--title", "second look"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out / 'report.html'}"
    assert os.readlink(out / "report.html") == ".evaldag/current/report.html"
    assert "<title>second look</title>" in (out / "report.html").read_text()
    assert cli.main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 0
    assert cli.main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 0  # its own report: replaced


# ---------------------------------------------------------------- item 3: one set at every instant
def _traced_publish(monkeypatch, out: Path, views: list) -> None:
    """Record OUT's visible set at every line publish runs (every instant a kill could hit)."""
    real = out_files.publish

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != sets.__file__:
            return None

        def line(frame, event, arg):
            if event == "line":
                views.append(view(out))
            return line
        return line

    def traced(stage, where):
        sys.settrace(tracer)
        try:
            real(stage, where)
        finally:
            sys.settrace(None)
        views.append(view(out))

    monkeypatch.setattr(out_files, "publish", traced)


@pytest.mark.parametrize("first,second", [(RUN_A, RUN_B), (RUN_B, RUN_A)])
def test_every_instant_of_a_publish_shows_one_run_set(tmp_path, monkeypatch, first, second):
    out, cache = tmp_path / "out", tmp_path / "c"
    assert _toy(out, cache, first) == 0
    old = view(out)
    views: list = []
    _traced_publish(monkeypatch, out, views)
    assert _toy(out, cache, second) == 0
    new = view(out)
    assert _one_run(old) != _one_run(new)
    assert len(views) > 20 and all(v in (old, new) for v in views)
    assert views.index(new) > 5  # the switch happened inside publish, at one line
    # names the new set lacks are gone from the listing too, not only unreadable
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(new)


def test_plain_files_of_an_older_evaldag_switch_in_one_step_too(tmp_path, monkeypatch):
    out, cache = tmp_path / "out", tmp_path / "c"
    assert _toy(out, cache, RUN_A) == 0
    old = view(out)
    shutil.rmtree(out)  # what an older evaldag left: plain files, plus a file that is not ours
    out.mkdir()
    for name, data in old.items():
        (out / name).write_bytes(data)
    (out / "notes.txt").write_text("mine")
    old["notes.txt"] = b"mine"
    views: list = []
    _traced_publish(monkeypatch, out, views)
    assert _toy(out, cache, RUN_B) == 0
    new = view(out)
    assert _one_run(new) == "B" and new["notes.txt"] == b"mine"
    assert all(v in (old, new) for v in views) and old in views and new in views
    assert (out / "notes.txt").is_symlink() is False and os.readlink(out / "run.json") == ".evaldag/current/run.json"


def _kill_self_at(monkeypatch, module, name, signum):
    real = getattr(module, name)

    def hit(*a, **k):
        os.kill(os.getpid(), signum)
        return real(*a, **k)
    monkeypatch.setattr(module, name, hit)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_staging_keeps_the_old_set_and_says_so(tmp_path, monkeypatch, capsys, signum):
    out, cache = tmp_path / "out", tmp_path / "c"
    assert _toy(out, cache, RUN_A) == 0
    old, sets_before = view(out), sorted((out / ".evaldag" / "sets").iterdir())
    _kill_self_at(monkeypatch, out_files, "_dump", signum)
    assert _toy(out, cache, RUN_B) == 128 + signum
    assert capsys.readouterr().err.strip().splitlines() == [
        f"evaldag: interrupted ({signal.Signals(signum).name}): kept the previous outputs in {out}"]
    assert view(out) == old and sorted((out / ".evaldag" / "sets").iterdir()) == sets_before
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the run's handler is gone again


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_switch_is_held_until_the_new_set_is_out(tmp_path, monkeypatch, capsys, signum):
    out, cache = tmp_path / "out", tmp_path / "c"
    assert _toy(out, cache, RUN_A) == 0
    _kill_self_at(monkeypatch, sets, "_point_current", signum)
    assert _toy(out, cache, RUN_B) == 128 + signum
    assert capsys.readouterr().err.strip().splitlines() == [
        f"evaldag: interrupted ({signal.Signals(signum).name}): published the new set in {out}"]
    assert _one_run(view(out)) == "B"
    assert [p.name for p in (out / ".evaldag" / "sets").iterdir() if (p / sets.STAGE_MARK).exists()] == []


def test_sigterm_at_random_instants_leaves_one_run_set(tmp_path):
    """Real processes, real SIGTERM at random times: the set is always one run's, and the
    line printed says truly whether the new set came out."""
    out, cache = tmp_path / "out", tmp_path / "c"
    base = ["--quiet", "--out", str(out), "--cache-dir", str(cache)]
    assert subprocess.run([EVALDAG, *RUN_A, *base]).returncode == 0
    t0 = time.time()
    assert subprocess.run([EVALDAG, *RUN_B, *base]).returncode == 0
    span = time.time() - t0
    rng, said = random.Random(26), set()
    for i in range(4):
        before = _one_run(view(out))
        words = RUN_A if before == "B" else RUN_B
        p = subprocess.Popen([EVALDAG, *words, *base], stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.3, 1.0) * span)
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=120)[1].strip().splitlines()
        after = _one_run(view(out))
        if p.returncode == 143:
            assert len(err) == 1 and err[0].startswith("evaldag: interrupted (SIGTERM): ")
            said.add(err[0].split(": ")[2].split(" in ")[0])
            new = "A" if before == "B" else "B"
            assert after == (new if "published" in err[0] or "after the run had finished" in err[0] else before)
        elif p.returncode == -signal.SIGTERM:  # importing, or in Python's last teardown (handlers reset):
            assert err == []  # the default action, no line; the set is still one run's (_one_run checked it)
        else:
            assert p.returncode == 0 and after != before
    stages = [d for d in (out / ".evaldag" / "sets").iterdir() if (d / sets.STAGE_MARK).exists()]
    assert stages == []


def test_leftovers_of_killed_runs_are_swept_and_live_ones_kept(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "c"
    assert _toy(out, cache, RUN_A) == 0
    setdir = out / ".evaldag" / "sets"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for name, pid in (("killed", dead.pid), ("running", os.getpid())):
        (setdir / name).mkdir()
        (setdir / name / "TOY_EVAL.json").write_text("{}")
        (setdir / name / sets.STAGE_MARK).write_text(json.dumps({"pid": pid, "host": os.uname().nodename,
                                                                "started": time.time()}))
    (setdir / "old-published").mkdir()  # a set two publishes ago
    older = out / ".tmp-out-abc123"  # what an older evaldag's killed run left
    older.mkdir()
    (older / "run.json").write_text("{}")
    os.utime(older, (time.time() - 7200, time.time() - 7200))
    users = out / ".tmp-out-notes"  # the same name shape, but a user's: not only a run's files in it
    users.mkdir()
    (users / "draft.txt").write_text("mine")
    os.utime(users, (time.time() - 7200, time.time() - 7200))
    previous = os.path.realpath(out / ".evaldag" / "current")
    assert _toy(out, cache, RUN_B) == 0
    left = sorted(p.name for p in setdir.iterdir())
    current = Path(os.path.realpath(out / ".evaldag" / "current")).name
    assert left == sorted(["running", Path(previous).name, current])
    assert not older.exists()
    assert (users / "draft.txt").read_text() == "mine"


# ---------------------------------------------------------------- item 4: another run's files
def test_a_second_run_into_one_out_shows_only_its_own_files(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "c"
    assert _toy(out, cache, RUN_A) == 0
    assert (out / "RUN_EVAL.json").exists() and "toy_min_k" in (out / "report.html").read_text()
    assert _toy(out, cache, RUN_B) == 0
    assert sorted(p.name for p in out.iterdir()) == [".evaldag", "TOY_EVAL.json", "TOY_SUMMARY.json", "report.html", "run.json"]
    html = (out / "report.html").read_text()
    assert "<title>evaldag report: toy</title>" in html
    assert "toy_min_k" not in html.split('id="graph"')[0]  # the metrics table holds only this run's metric


# ---------------------------------------------------------------- item 15: secrets
HF = "hf_" + "A1b2C3d4E5f6G7h8I9j0KlMn"
SK = "sk-" + "proj_9xY8wV7uT6sR5qP4"


def test_secrets_in_arguments_and_paths_never_reach_run_json_or_the_report(tmp_path, monkeypatch):
    where = tmp_path / SK
    where.mkdir()
    monkeypatch.chdir(where)  # the cwd is recorded too
    out = tmp_path / f"run-{HF}"  # also the report's column title
    assert cli.main([*RUN_B, "--quiet", "--out", str(out), "--cache-dir", str(tmp_path / HF / "cache")]) == 0
    run_json, html = (out / "run.json").read_text(), (out / "report.html").read_text()
    for text in (run_json, html):
        assert HF not in text and SK not in text and "A1b2C3d4" not in text
    prov = json.loads(run_json)["provenance"]
    assert prov["command"][-1] == str(tmp_path / "***" / "cache") and prov["cwd"] == str(tmp_path / "***")
    assert prov["command"][-3] == str(tmp_path / "run-***") and "run-***" in html


def test_redact_masks_option_values_urls_and_query_secrets():
    argv = ["evaldag", "run", "x", "--api-key", "abc123", "--hf-token=xyz", "--max-new-tokens", "32",
            "--data", "https://me:pa55@host.org/d?split=a&api_key=K1&token=T2", "--model", f"/m/{HF}/ckpt"]
    assert redact_argv(argv) == ["evaldag", "run", "x", "--api-key", "***", "--hf-token=***", "--max-new-tokens", "32",
                                 "--data", "https://***@host.org/d?split=a&api_key=***&token=***", "--model", "/m/***/ckpt"]
    assert redact_text("hf_short sk-short plain/path") == "hf_short sk-short plain/path"


def test_an_ignored_sigint_stays_ignored_during_the_switch(tmp_path, monkeypatch, capsys):
    """Under `nohup cmd &` SIGINT is ignored: holding signals must not start acting on it."""
    out, cache = tmp_path / "out", tmp_path / "c"
    assert _toy(out, cache, RUN_A) == 0
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _kill_self_at(monkeypatch, sets, "_point_current", signal.SIGINT)
        assert _toy(out, cache, RUN_B) == 0 and capsys.readouterr().err == ""
    finally:
        signal.signal(signal.SIGINT, old)
    assert _one_run(view(out)) == "B"


def test_input_paths_are_every_existing_path_in_the_config(tmp_path):
    import pydantic

    from evaldag.engine.benchmark import Benchmark

    class Opts(pydantic.BaseModel):
        embeddings: str | None = None

    class Cfg(pydantic.BaseModel):
        model: str
        data: tuple[str, ...] = ()
        split: str = "News"
        hub: str = "locuslab/TOFU"
        lookup: Opts = Opts()

    (tmp_path / "m").mkdir()
    (tmp_path / "d.json").write_text("[]")
    (tmp_path / "e.npz").write_bytes(b"")
    cfg = Cfg(model=str(tmp_path / "m"), data=(str(tmp_path / "d.json"), str(tmp_path / "gone.json")),
              lookup=Opts(embeddings=str(tmp_path / "e.npz")))
    assert Benchmark().input_paths(cfg) == [("--model", tmp_path / "m"), ("--data", tmp_path / "d.json"),
                                            ("--embeddings", tmp_path / "e.npz")]
