"""Fault campaign: break a real cache of ``evaldag run tofu`` every way we know, rerun, compare.

    python tests/perf/fault_campaign.py [--kills N] [--corruptions M] [--seed S] [--work DIR]

On the fixture checkpoints (tests/fixtures/tiny-llama) and data (tests/fixtures/tofu_tiny)
it makes an uninterrupted baseline, then for every trial copies the baseline cache,
injects one fault, reruns ``evaldag run tofu`` in a subprocess and compares
TOFU_EVAL/TOFU_SUMMARY with the baseline. Faults:

* SIGKILL of a cold run at a random moment (then a rerun);
* corruption of a random cache file of each kind (node entry, history, file-hash memo,
  request database, its WAL) in each mode (truncate, bit flip, zero page, delete); node
  entries are removed alongside request-database faults, so the rerun has to read it;
* a full disk: the cache, then --out, on a small tmpfs when run as root (else a patched
  writer); then space is freed and the run resumes;
* hostile entries: a header claiming 2^60 bytes, JSON nested 100,000 deep, a 100 MB
  string, a history file of the wrong type;
* issue 17: a checkpoint swapped under its old mtime, a misplaced entry, a forged entry
  (caught by ``cache verify --deep``, not by a run: the cache is not authenticated),
  prune with a link to outside, an orphan temp file, eight writers of one --out.

It prints one row per fault kind: trials, recovered with identical results, failed
clearly (a one-line error, no traceback), crashed, wrong numbers. The goal: 0 crashed
and 0 wrong numbers in every row. A small deterministic subset runs in the default test
run (tests/engine/test_faults.py, tests/engine/test_cache_trust.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))
METRICS = "forget_Q_A_Prob,forget_truth_ratio,forget_quality,forget_Q_A_ROUGE,model_utility,privleak,extraction_strength"
DRIFT = 2e-5  # the largest batch-shape drift measured (docs/cache.md): beyond it a difference is a wrong number
COLUMNS = ("trials", "recovered", "failed clearly", "crashed", "wrong numbers")


def argv(model: Path, out: Path, cache: Path) -> list[str]:
    return [EVALDAG, "run", "tofu", "--model", str(model), "--data", str(FIX / "tofu_tiny"), "--metrics", METRICS,
            "--retain-model", str(FIX / "tiny-llama" / "retain"), "--device", "cpu", "--dtype", "fp32",
            "--quiet", "--out", str(out), "--cache-dir", str(cache)]


def evaldag(cmd: list[str], timeout: float = 900, prelude: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    if prelude:  # run through python so a fault can be patched in first
        code = prelude + "\nfrom evaldag.engine.cli import main\nraise SystemExit(main(sys.argv[1:]))"
        cmd = [sys.executable, "-c", "import sys\n" + code, *cmd[1:]]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -999, "", f"timeout: {e}")


def drift(a, b) -> float:
    """Largest relative difference between two JSON values of the same shape (inf if shapes differ)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return max((drift(a[k], b[k]) for k in a), default=0.0) if a.keys() == b.keys() else float("inf")
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return max((drift(x, y) for x, y in zip(a, b)), default=0.0) if len(a) == len(b) else float("inf")
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        if a == b or (a != a and b != b):
            return 0.0
        return abs(a - b) / max(abs(a), abs(b))
    return 0.0 if a == b else float("inf")


def outputs(out: Path) -> tuple | None:
    try:
        return tuple(json.loads((out / f"TOFU_{k}.json").read_text()) for k in ("EVAL", "SUMMARY"))
    except (OSError, ValueError):
        return None


class Campaign:
    def __init__(self, work: Path, seed: int):
        self.work, self.rng = work, random.Random(seed)
        self.rows: dict[str, list[int]] = defaultdict(lambda: [0] * len(COLUMNS))
        self.notes: list[str] = []
        self.n = 0
        self.target = FIX / "tiny-llama" / "target"

    # ------------------------------------------------------------------ bookkeeping
    def trial_dir(self) -> Path:
        self.n += 1
        d = self.work / f"t{self.n:03d}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    def classify(self, kind: str, proc: subprocess.CompletedProcess, got: tuple | None, want: tuple | None, note: str = "") -> None:
        row = self.rows[kind]
        row[0] += 1
        crashed = proc.returncode not in (0, 1, 2) or "Traceback" in proc.stderr
        if crashed:
            row[3] += 1
        elif proc.returncode == 0 and got == want:
            row[1] += 1
        elif proc.returncode == 0:
            row[4] += 1
        else:
            row[2] += 1
        if crashed or (proc.returncode == 0 and got != want) or note:
            tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
            self.notes.append(f"{kind} (trial {self.n}, exit {proc.returncode}): {note or tail}")

    def warm_copy(self, d: Path, keep_objects: bool = True) -> Path:
        cache = d / "cache"
        shutil.copytree(self.cache0, cache, symlinks=True)
        if not keep_objects:
            shutil.rmtree(cache / "objects", ignore_errors=True)
        return cache

    # ------------------------------------------------------------------ baseline
    def baseline(self) -> None:
        self.cache0, self.out0 = self.work / "cache0", self.work / "out0"
        t = time.time()
        proc = evaldag(argv(self.target, self.out0, self.cache0))
        if proc.returncode != 0:
            raise SystemExit(f"baseline failed:\n{proc.stderr}")
        self.want = outputs(self.out0)
        self.cold_seconds = time.time() - t
        retain_out = self.work / "out-retain"
        evaldag(argv(FIX / "tiny-llama" / "retain", retain_out, self.work / "cache-retain"))
        self.want_retain = outputs(retain_out)

    # ------------------------------------------------------------------ faults
    def kills(self, n: int) -> None:
        for _ in range(n):
            d = self.trial_dir()
            cmd = argv(self.target, d / "out", d / "cache")
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
            time.sleep(self.rng.uniform(0.5, max(1.0, self.cold_seconds)))
            p.send_signal(signal.SIGKILL)
            p.wait()
            proc = evaldag(cmd)
            self.classify("SIGKILL at a random point", proc, outputs(d / "out"), self.want)

    def corruptions(self, m: int) -> None:
        modes = {"truncate": self._truncate, "bit flip": self._flip, "zero page": self._zero, "delete": os.unlink}
        kinds = {
            "node entry": lambda c: sorted((c / "objects").glob("*/*.safetensors")),
            "history": lambda c: sorted((c / "history").glob("*.json")),
            "file-hash memo": lambda c: [c / "filehash.json"],
            "request database": lambda c: [c / "requests.sqlite"],
            "request WAL": lambda c: [c / "requests.sqlite-wal"],
        }
        for kind, files in kinds.items():
            for mode, damage in modes.items():
                for _ in range(m):
                    d = self.trial_dir()
                    cache = self.warm_copy(d)
                    if kind == "request WAL":
                        self._fake_wal(cache)
                    targets = [p for p in files(cache) if p.exists()]
                    if not targets:
                        continue
                    damage(self.rng.choice(targets))
                    if kind.startswith("request"):  # make the rerun read the request database
                        shutil.rmtree(cache / "objects", ignore_errors=True)
                    proc = evaldag(argv(self.target, d / "out", cache))
                    self.classify(f"{kind}: {mode}", proc, outputs(d / "out"), self.want)

    def _fake_wal(self, cache: Path) -> None:
        """A WAL with frames in it: the database as it would be mid-run (copied before checkpoint)."""
        wal = cache / "requests.sqlite-wal"
        if not wal.exists():
            import sqlite3

            conn = sqlite3.connect(cache / "requests.sqlite")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute("UPDATE results SET written = written")
            conn.commit()
            shutil.copyfile(wal, wal.with_name("wal.copy"))
            conn.close()
            os.replace(wal.with_name("wal.copy"), wal)

    def _truncate(self, p: Path) -> None:
        os.truncate(p, int(p.stat().st_size * self.rng.uniform(0.05, 0.95)))

    def _flip(self, p: Path) -> None:
        data = bytearray(p.read_bytes())
        if data:
            i = self.rng.randrange(len(data))
            data[i] ^= 1 << self.rng.randrange(8)
            p.write_bytes(bytes(data))

    def _zero(self, p: Path) -> None:
        size = p.stat().st_size
        off = self.rng.randrange(0, max(1, size), 4096) if size > 4096 else 0
        with open(p, "r+b") as f:
            f.seek(off)
            f.write(b"\0" * min(4096, size - off))

    def full_disks(self) -> None:
        root = os.geteuid() == 0 and shutil.which("mount") is not None
        for where in ("cache", "out"):
            d = self.trial_dir()
            mnt = d / "tmpfs"
            mnt.mkdir()
            cache, out = (mnt / "cache", d / "out") if where == "cache" else (d / "cache", mnt / "out")
            size = 64 << 10 if where == "cache" else _bytes(self.out0) + (16 << 10)  # the old set fits, a new one not
            mounted = root and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)]).returncode == 0
            if where == "out":
                shutil.copytree(self.cache0, cache)
                if mounted:
                    shutil.copytree(self.out0, out)  # an old set that must survive
            prelude = "" if mounted else _patched_disk(where)
            old = outputs(out)
            first = evaldag(argv(self.target, out, cache), prelude=prelude)
            left = [p for p in mnt.rglob(".tmp-*")]
            clear = first.returncode == 2 and len(first.stderr.strip().splitlines()) == 1 and "cannot write" in first.stderr
            if mounted:
                subprocess.run(["mount", "-o", "remount,size=512m", str(mnt)])
            intact = outputs(out) == old
            proc = evaldag(argv(self.target, out, cache))
            note = "" if clear and not left and intact else f"first run: exit {first.returncode}, {first.stderr.strip()[:200]!r}, temporaries {len(left)}, old set intact {intact}"
            self.classify(f"full disk ({where}{', tmpfs' if mounted else ', patched'})", proc if not note else first, outputs(out), self.want, note)
            if mounted:
                subprocess.run(["umount", str(mnt)])

    def hostile(self) -> None:
        from evaldag.engine.cache.codec import FORMAT

        def st(header: bytes) -> bytes:
            return len(header).to_bytes(8, "little") + header

        meta = lambda skeleton: st(json.dumps({"__metadata__": {"format": FORMAT, "skeleton": skeleton, "meta": "{}", "sha256": "x"}}).encode())  # noqa: E731
        entries = {
            "header claims 2^60 bytes": lambda: (1 << 60).to_bytes(8, "little") + b"{}",
            "JSON nested 100,000 deep": lambda: meta("[" * 100000 + "]" * 100000),
            "a 100 MB string": lambda: meta("x" * (100 << 20)),
        }
        for name, make in entries.items():
            d = self.trial_dir()
            cache = self.warm_copy(d)
            for p in self.rng.sample(sorted((cache / "objects").glob("*/*.safetensors")), 1 if "MB" in name else 3):
                p.write_bytes(make())
            proc = evaldag(argv(self.target, d / "out", cache))
            self.classify(f"hostile entry: {name}", proc, outputs(d / "out"), self.want)
        d = self.trial_dir()
        cache = self.warm_copy(d, keep_objects=False)
        for i, p in enumerate(sorted((cache / "history").glob("*.json"))):
            p.write_text(["[1, 2]", '"text"', "[" * 100000, "null"][i % 4])
        proc = evaldag(argv(self.target, d / "out", cache))
        self.classify("hostile history file", proc, outputs(d / "out"), self.want)

    def trust(self) -> None:
        # 17.1: a checkpoint swapped for the retain model's weights, mtime set back
        d = self.trial_dir()
        model = d / "model"
        shutil.copytree(self.target, model)
        cache = d / "cache"
        evaldag(argv(model, d / "out1", cache))
        w = model / "model.safetensors"
        st = os.stat(w)
        shutil.copyfile(FIX / "tiny-llama" / "retain" / "model.safetensors", w)
        os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
        proc = evaldag(argv(model, d / "out", cache))
        # the retain model's numbers; its nodes were first computed beside the target's requests in the
        # first run, so values may differ from the retain-only baseline by batch-shape drift (docs/cache.md)
        got, worst = outputs(d / "out"), drift(outputs(d / "out"), self.want_retain)
        self.classify("swapped checkpoint, mtime set back", proc, self.want_retain if worst <= DRIFT else got, self.want_retain,
                      f"retain's numbers up to batch drift, max relative difference {worst:.1e}" if 0 < worst <= DRIFT else "")
        # 17.2: an entry copied to another node's path
        d = self.trial_dir()
        cache = self.warm_copy(d)
        a, b = self.rng.sample(sorted((cache / "objects").glob("*/*.safetensors")), 2)
        shutil.copyfile(a, b)
        proc = evaldag(argv(self.target, d / "out", cache))
        self.classify("misplaced entry", proc, outputs(d / "out"), self.want)
        # 17.2: a forged aggregator value with a recomputed checksum: verify --deep must say so
        d = self.trial_dir()
        cache = self.warm_copy(d)
        forged = _forge_one(cache)
        proc = evaldag([EVALDAG, "cache", "verify", "--deep", "--sample", "1000", "--cache-dir", str(cache)])
        caught = proc.returncode == 1 and f"differs: {forged}" in proc.stdout
        self.classify("forged entry (verify --deep)", subprocess.CompletedProcess([], 1 if caught else 0, "", ""),
                      ("forged",), None, "" if caught else f"not caught: {proc.stdout[-300:]!r}")
        # 17.3: prune with a link to outside; 17.4: an orphan temp file
        d = self.trial_dir()
        cache = self.warm_copy(d)
        outside = d / "outside"
        outside.mkdir()
        (outside / "model.safetensors").write_bytes(b"precious")
        os.utime(outside / "model.safetensors", (0, 0))
        (cache / "objects" / "zz").symlink_to(outside, target_is_directory=True)
        orphan = next((cache / "objects").glob("*/")) / ".tmp-orphan.safetensors"
        orphan.write_bytes(b"\x10\0\0\0trunc")
        os.utime(orphan, (time.time() - 7200,) * 2)
        prune = evaldag([EVALDAG, "cache", "prune", "--older-than", "3650d", "--cache-dir", str(cache)])
        verify = evaldag([EVALDAG, "cache", "verify", "--cache-dir", str(cache)])
        proc = evaldag(argv(self.target, d / "out", cache))
        ok = (outside / "model.safetensors").read_bytes() == b"precious" and not orphan.exists() and verify.returncode == 0
        self.classify("link out of the cache + orphan temp", proc if prune.returncode == 0 else prune,
                      outputs(d / "out"), self.want, "" if ok else "outside file touched, orphan kept or verify failed")
        # 17.5: eight writers of one --out
        d = self.trial_dir()
        cache = self.warm_copy(d)
        procs = [subprocess.Popen(argv(self.target, d / "out", cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(8)]
        for p in procs:
            out, err = p.communicate(timeout=900)
            self.classify("8 writers of one --out", subprocess.CompletedProcess([], p.returncode, out, err), outputs(d / "out"), self.want)

    # ---- issue 26: outputs
    def hostile_outputs(self, n: int = 8) -> None:
        """--out over an input, report --out over EVAL, signals while publishing, two runs into
        one folder, a secret in argv. A torn set (files of two runs visible together) counts
        as wrong numbers; a signal's exit with its one line, or a refusal, as failed clearly."""
        retain = FIX / "tiny-llama" / "retain"
        oul = FIX / "open_unlearning"

        def with_logs(out: Path, cache: Path, logs: Path) -> list[str]:
            a = argv(self.target, out, cache)
            i = a.index("--retain-model")
            return a[:i] + ["--retain-logs", str(logs)] + a[i + 2:]

        # --out set to the --retain-logs folder: the logs cannot be rebuilt
        d = self.trial_dir()
        logs = d / "logs"
        logs.mkdir()
        for k in ("EVAL", "SUMMARY"):
            shutil.copy(oul / f"retain_TOFU_{k}.json", logs / f"TOFU_{k}.json")
        before = {p.name: p.read_bytes() for p in logs.iterdir()}
        cache = self.warm_copy(d)
        proc = evaldag(with_logs(logs, cache, logs))
        after = {p.name: p.read_bytes() for p in logs.iterdir() if p.is_file() and not p.name.startswith(".")}
        if proc.returncode == 0:  # the logs were replaced: the next run's forget_quality reads our own outputs
            again = evaldag(with_logs(d / "out2", cache, logs))
            fq = (outputs(d / "out2") or ({}, {}))[1].get("forget_quality")
            note = f"retain logs overwritten; next run's forget_quality {fq}"
        else:
            note = "" if after == before else "refused, but the logs changed"
        self.classify("--out over retain logs", proc, after, before, note if proc.returncode == 0 or after != before else "")
        # evaldag report --out OUT/TOFU_EVAL.json
        d = self.trial_dir()
        cache = self.warm_copy(d)
        evaldag(argv(self.target, d / "out", cache))
        proc = evaldag([EVALDAG, "report", str(d / "out"), "--out", str(d / "out" / "TOFU_EVAL.json")])
        got = outputs(d / "out")
        self.classify("report --out over EVAL", proc, got, self.want,
                      "" if got == self.want else "TOFU_EVAL.json is no longer results")
        # signals at the k-th rename of a warm run (every rename: cache files and the publish),
        # and at random instants; runs alternate target and retain, so a mix of two runs shows
        d = self.trial_dir()
        cache, out = self.warm_copy(d), d / "out"
        models = {"target": self.target, "retain": retain}
        evaldag(argv(retain, out, cache))
        evaldag(argv(self.target, out, cache))
        state = {"last": "target"}

        def one(signum: int, k: int | None, delay: float | None) -> None:
            nxt = "retain" if state["last"] == "target" else "target"
            before = self._which(out)
            if k is not None:
                pre = ("import os, signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"  # `cmd &` ignores SIGINT
                       "_r = os.replace\n_n = [0]\n"
                       f"def _rep(a, b, **kw):\n    _n[0] += 1\n    if _n[0] == {k}: os.kill(os.getpid(), {int(signum)})\n"
                       "    return _r(a, b, **kw)\nos.replace = _rep")
                proc = evaldag(argv(models[nxt], out, cache), prelude=pre)
            else:  # a random instant after the imports (most of a warm run), so the kill lands in the run
                proc = _ready_then(argv(models[nxt], out, cache), lambda pr: (time.sleep(delay), pr.send_signal(signum)))
            now = self._which(out)
            lines = proc.stderr.strip().splitlines()
            kind = f"{signal.Signals(signum).name} at " + ("the k-th rename" if k is not None else "random instants")
            told = len(lines) == 1 and lines[0].startswith("evaldag: interrupted")
            if now[0] == "torn":
                self.classify(kind, subprocess.CompletedProcess([], 0, "", proc.stderr), "torn", "one run", now[1])
            elif proc.returncode == 0:
                self.classify(kind, proc, now[0], nxt)
            elif told and (now[0] == nxt) == ("published" in lines[0]) and now[0] in (before[0], nxt):
                self.classify(kind, subprocess.CompletedProcess([], 2, "", ""), None, None)
            elif proc.returncode == -signal.SIGTERM and not proc.stderr and now[0] in (before[0], nxt):
                self.classify(kind, subprocess.CompletedProcess([], 2, "", ""), None, None)  # importing, or Python's teardown
                self.notes.append(f"{kind} (trial {self.n}): killed while importing or in Python's final teardown "
                                  f"(default action, no line); set whole: {'the old' if now == before else 'the new'}")
            else:
                self.classify(kind, proc, now[0], nxt, f"exit {proc.returncode}, no one-line account; set {now[0]}")
            state["last"] = now[0] if now[0] in models else state["last"]

        _ready_then(argv(models["retain"], out, cache), lambda pr: setattr(self, "_t_ready", time.time()))
        span = time.time() - self._t_ready  # a warm run after its imports
        _ready_then(argv(models["target"], out, cache), lambda pr: None)
        for signum in (signal.SIGTERM, signal.SIGINT):
            for k in range(1, 7):  # a warm run renames a handful of files: cache, stage, publish
                one(signum, k, None)
        for _ in range(n):
            one(signal.SIGTERM, None, self.rng.uniform(0.0, 1.0) * span)
        # two runs into one default ./evaldag-out: tofu on the target, then muse on the retain model
        d = self.trial_dir()
        cache = self.warm_copy(d)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        tofu = [a for a in argv(self.target, Path("x"), cache) if a not in ("--out", "x")]
        subprocess.run(tofu, cwd=d, capture_output=True, env=env)
        muse = [EVALDAG, "run", "muse", "--model", str(retain), "--data", str(FIX / "muse_tiny"), "--device", "cpu",
                "--retain-logs", str(oul / "retain_MUSE_EVAL.json"), "--quiet", "--cache-dir", str(cache)]
        proc = subprocess.run(muse, cwd=d, capture_output=True, text=True, env=env)
        o = d / "evaldag-out"
        html = (o / "report.html").read_text() if (o / "report.html").exists() else ""
        got = ((o / "TOFU_EVAL.json").exists(), "forget_truth_ratio" in html, (o / "MUSE_EVAL.json").exists())
        self.classify("two runs into one default out", proc, got, (False, False, True),
                      "" if got == (False, False, True) else f"TOFU files shown {got[0]}, TOFU in the report {got[1]}")
        # a secret in argv: a token in a path argument and in the working folder
        token = "hf_" + "Zq8" * 10
        d = self.trial_dir()
        where = d / token
        where.mkdir()
        cache = shutil.copytree(self.cache0, where / "cache", symlinks=True)
        proc = subprocess.run(argv(self.target, d / "out", cache), cwd=where, capture_output=True, text=True, env=env)
        leak = [f for f in ("run.json", "report.html") if (d / "out" / f).exists() and token in (d / "out" / f).read_text()]
        self.classify("secret in argv", proc, leak, [], f"token recorded in {', '.join(leak)}" if leak else "")

    def _which(self, out: Path) -> tuple[str, str]:
        """Which run OUT shows: 'target' / 'retain' when EVAL, SUMMARY and run.json agree, else 'torn'."""
        got = outputs(out)
        try:
            cmd = json.loads((out / "run.json").read_text())["provenance"]["command"]
            named = Path(cmd[cmd.index("--model") + 1]).name
        except (OSError, ValueError, KeyError):
            return "torn", "run.json unreadable"
        by_eval = [m for m, w in (("target", self.want), ("retain", self.want_retain)) if got is not None
                   and drift(got[0], w[0]) <= DRIFT and drift(got[1], w[1]) <= DRIFT]
        if by_eval == [named]:
            return named, ""
        return "torn", f"run.json names {named}, EVAL/SUMMARY match {by_eval or 'neither'}"

    # ------------------------------------------------------------------ report
    def table(self) -> str:
        w = max(len(k) for k in self.rows) + 2
        lines = [f"{'fault':{w}s}" + "".join(f"{c:>16s}" for c in COLUMNS), "-" * (w + 16 * len(COLUMNS))]
        for kind, row in self.rows.items():
            lines.append(f"{kind:{w}s}" + "".join(f"{x:16d}" for x in row))
        return "\n".join(lines + [""] + self.notes)


def _ready_then(cmd: list[str], act) -> subprocess.CompletedProcess:
    """Run evaldag through python, call ``act(popen)`` once its imports are done (it says
    "ready" on stderr), and return the finished process without that line."""
    code = ("import sys\nfrom evaldag.engine.cli import main\nsys.stderr.write('ready\\n'); sys.stderr.flush()\n"
            "raise SystemExit(main(sys.argv[1:]))")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    pr = subprocess.Popen([sys.executable, "-c", code, *cmd[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = pr.stderr.readline()
    act(pr)
    o, e = pr.communicate(timeout=900)
    return subprocess.CompletedProcess(cmd, pr.returncode, o, e if first == "ready\n" else first + e)


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _patched_disk(where: str) -> str:
    """Python run first in the subprocess: the disk 'fills' after a few writes."""
    if where == "cache":
        return ("import errno, os\nfrom evaldag.engine.cache import files\n_n = [0]\n_real = os.fsync\n"
                "def _fsync(fd):\n    _n[0] += 1\n    if _n[0] > 4: raise OSError(errno.ENOSPC, 'No space left on device')\n    return _real(fd)\n"
                "files.os.fsync = _fsync")
    return ("import errno\nfrom evaldag.engine.outputs import files\n_real = files._dump\n_n = [0]\n"
            "def _dump(p, o):\n    _n[0] += 1\n    if _n[0] > 1: raise OSError(errno.ENOSPC, 'No space left on device')\n    _real(p, o)\n"
            "files._dump = _dump")


def _forge_one(cache: Path) -> Path:
    """Change the value of one stored aggregator that reads no resource; keep its checksum valid."""
    from evaldag.engine.cache.codec import pack, unpack
    from evaldag.engine.declare import REGISTRY

    for p in sorted((cache / "objects").glob("*/*.safetensors")):
        value, meta = unpack(p.read_bytes())
        m = REGISTRY.get(meta.get("metric", ""))
        if m is not None and not m.scorer and not m.needs and hasattr(value, "agg_value") and isinstance(value.agg_value, float):
            value.agg_value = 0.987654321
            p.write_bytes(pack(value, meta))
            return p
    raise SystemExit("no aggregator entry to forge")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--corruptions", type=int, default=1, help="trials per (file kind, mode)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="/tmp/evaldag-fault-campaign")
    p.add_argument("--only", default=None, metavar="NAME[,NAME]", help="run only these Campaign methods (the baseline always runs)")
    a = p.parse_args()
    only = set(a.only.split(",")) if a.only else None

    def want(name: str) -> bool:
        return only is None or name in only
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    c = Campaign(work, a.seed)
    c.baseline()
    if want("kills"):
        c.kills(a.kills)
    if want("corruptions"):
        c.corruptions(a.corruptions)
    if want("full_disks"):
        c.full_disks()
    if want("hostile"):
        c.hostile()
    if want("trust"):
        c.trust()
    if want("hostile_outputs"):
        c.hostile_outputs()
    print(c.table())
    bad = sum(row[3] + row[4] for row in c.rows.values())
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
